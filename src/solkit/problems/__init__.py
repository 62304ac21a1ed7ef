"""solkit.problems"""
