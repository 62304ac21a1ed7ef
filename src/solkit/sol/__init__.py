"""solkit.sol"""
