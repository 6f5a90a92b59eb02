"""GGUF files (ember/gguf.h): typed metadata and tensors"""



def load(path: str) -> tuple:
    """Reads a GGUF file: (metadata dict, tensors dict), in the file's order."""

def save(path: str, metadata: dict, tensors: dict) -> None:
    """
    Writes a GGUF file atomically (ints as int64, floats as float64, lists as arrays).
    """
