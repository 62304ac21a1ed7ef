"""solkit.hardware"""
