"""The compute side as the scheduler sees it: its RPC API and a simulated node."""
