"""solkit.bench"""
