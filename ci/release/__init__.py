"""Stage 5, the release: the results ledger, ship (only on passing evidence for exactly this build), and the
main job that walks the whole pipeline."""
