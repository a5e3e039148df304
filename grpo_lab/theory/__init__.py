"""Theory helpers: noise of group statistics, the memory model, KL in closed form."""
