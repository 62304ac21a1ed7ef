"""solkit.kernels"""
