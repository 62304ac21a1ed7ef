#include <torch/extension.h>

torch::Tensor run(torch::Tensor x, torch::Tensor weight) {
  auto inv = torch::rsqrt(x.pow(2).mean({-1}, true) + 1e-6);
  return x * inv * weight;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run, "rmsnorm"); }
