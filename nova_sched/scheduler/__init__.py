"""The scheduler: RPC endpoint, drivers, host states, filters and weighers."""
