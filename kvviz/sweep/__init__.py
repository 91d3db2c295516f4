"""Measured sweeps over prompt length x batch size, and their charts."""
