"""solkit.profile"""
