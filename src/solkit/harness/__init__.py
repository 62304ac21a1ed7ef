"""solkit.harness"""
