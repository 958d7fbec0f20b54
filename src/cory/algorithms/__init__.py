"""Pure tensor maths for RL fine-tuning: no models, no I/O."""
