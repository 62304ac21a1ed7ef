"""Embedding forward (gather) and backward (scatter-add with repeated ids) against torch in fp64: tiny shapes in
the CPU interpreter (fp32, fp16), a Llama-sized table in bf16 on a GPU."""

import pytest
import torch
import torch.nn.functional as F

from solkit.errors import SolkitError
from solkit.kernels import Embedding, embedding

TOL = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def ids_with_repeats(shape, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, shape, generator=g)
    ids.view(-1)[: max(1, ids.numel() // 3)] = 2  # a third of the tokens share one id
    return ids


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("path", ["sorted", "dense", "atomic"])
@pytest.mark.parametrize("shape,vocab,dim,pad", [((2, 5), 13, 40, None), ((7,), 9, 16, 2), ((3, 1, 4), 5, 33, -1)])
def test_forward_and_backward_match_torch(dtype, path, shape, vocab, dim, pad):
    torch.manual_seed(0)
    ids = ids_with_repeats(shape, vocab)
    w = torch.randn(vocab, dim, dtype=dtype)
    mine = w.clone().requires_grad_()
    out = embedding(ids, mine, pad, path)
    assert torch.equal(out, F.embedding(ids, w))
    dy = torch.randn(out.shape, dtype=dtype)
    out.backward(dy)
    ref = w.double().requires_grad_()
    F.embedding(ids, ref, pad).backward(dy.double())
    assert mine.grad.dtype == dtype and mine.grad.shape == w.shape
    torch.testing.assert_close(mine.grad.double(), ref.grad, atol=TOL[dtype] * 4, rtol=TOL[dtype])
    if pad is not None:
        assert not mine.grad[pad % vocab].any()


def test_sorted_backward_is_deterministic_and_sums_in_token_order():
    ids = torch.tensor([4, 1, 4, 4, 0, 1])
    dy = torch.tensor([[1e8], [1.0], [1.0], [-1e8], [2.0], [3.0]])  # fp32: the order of the sum shows
    grads = []
    for path in ("sorted", "sorted", "dense"):
        w = torch.zeros(6, 1, requires_grad=True)
        embedding(ids, w, path=path).backward(dy)
        grads.append(w.grad)
    assert torch.equal(grads[0], grads[2])
    assert torch.equal(grads[0], grads[1])
    assert grads[0][4].item() == 0.0  # token order in fp32: 1e8 + 1 rounds to 1e8, then - 1e8 (another order: 1)
    assert grads[0][1].item() == 4.0 and grads[0][0].item() == 2.0 and not grads[0][[2, 3, 5]].any()


def test_module_and_bad_input():
    m = Embedding(10, 16, padding_idx=0)
    assert not m.weight[0].any()
    assert m(torch.tensor([[1, 0]])).shape == (1, 2, 16)
    with pytest.raises(SolkitError, match="int32 or int64"):
        embedding(torch.tensor([1.0]), m.weight)
    with pytest.raises(SolkitError, match="path"):
        embedding(torch.tensor([1]), m.weight, path="nope").sum().backward()
    assert hasattr(torch.ops.solkit, "embedding") and hasattr(torch.ops.solkit, "embedding_bwd")


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["sorted", "dense", "atomic"])
def test_llama_table_bf16(path):
    ids = ids_with_repeats((8192,), 128256).cuda()
    w = torch.randn(128256, 4096, device="cuda", dtype=torch.bfloat16)
    mine = w.clone().requires_grad_()
    out = embedding(ids, mine, path=path)
    assert torch.equal(out, F.embedding(ids, w))
    dy = torch.randn_like(out)
    out.backward(dy)
    ref = w.float().requires_grad_()
    F.embedding(ids, ref).backward(dy.float())
    torch.testing.assert_close(mine.grad.float(), ref.grad, atol=0.1, rtol=TOL[torch.bfloat16])
