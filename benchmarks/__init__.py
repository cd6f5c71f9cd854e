"""Benchmarks: `python -m benchmarks` searches the kernel families on the public shape set,
gates each winner for correctness and times it against torch eager, cuBLASLt and
torch.compile; results land in benchmarks/results/ as JSON."""
