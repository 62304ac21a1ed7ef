"""solkit.report"""
