"""A smaller cache, live: kvpress presses and transformers' quantized cache, and their charts."""
