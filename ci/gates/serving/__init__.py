"""What the gates share to serve a model: a llama-server handle, the devices, the interleaved bench."""
