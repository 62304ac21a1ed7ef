"""solkit.train"""
