"""solkit.tune"""
