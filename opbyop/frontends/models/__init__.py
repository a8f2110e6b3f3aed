"""The zoo's torch models, written in the project (torchvision does not import beside torch 2.13)."""
