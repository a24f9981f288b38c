"""The tiny generated GGUF models the gates run on where no release model is given."""
