"""Where source bytes come from: git objects, a checkout, an installed package."""
