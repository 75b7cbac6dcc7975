"""Reports over the run store: `metrics` computes the numbers, `html` writes the page and its plots."""
