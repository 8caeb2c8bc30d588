"""Sweeping: a strategy x budget x seed grid over a dataset, run problem by problem into a resumable
results folder. :mod:`.config` says what a sweep runs, :mod:`.sweep` runs it, :mod:`.results` is
its folder, :mod:`.recipes` reads a sweep from YAML, :mod:`.distributed` shards it over Ray, and
:mod:`.trees` and :mod:`.siblings` are what a sweep keeps beside its rows."""
