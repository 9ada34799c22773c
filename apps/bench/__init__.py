"""Benchmark and evaluation commands and their corpora, kept out of the product apps."""
