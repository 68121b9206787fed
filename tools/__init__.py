"""Developer tools that are neither the product nor its benchmarks."""
