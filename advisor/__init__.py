"""cardwise's ground layer: hardware detection, GPU and model specs, memory and throughput estimates.

No textual, no accelerate; torch only where a module is traced (``advisor.tracer``, ``advisor.zoo``)."""
