"""What the gates share to serve a model, so that no gate reads another's: a llama-server handle, the devices, the
interleaved bench, the prompts, the model sets and how a drafter is launched, and the tokens/step formula."""
