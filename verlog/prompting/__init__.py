"""What the model is given each turn and how it answers: sliding memory, prompt budget, sampling."""
