"""Stage 2, the source: the fork store, the patch series, its classification at a commit, the one sync that
brings the submodule's checkout to pin + series, and export back to patches/."""
