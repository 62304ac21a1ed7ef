"""solkit.zoo: models built from a config with random weights (Hugging Face ids, config.json, module:function)."""
