"""cardwise's benchmarks: calibration (what regenerates advisor/data/*.json), speed, GPU checks, notebook. See README.md here."""
