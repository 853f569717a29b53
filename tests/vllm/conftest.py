"""The vLLM tests use the session's ``vllm_venv`` (``tests/conftest.py``): present, installed on demand, or a
clear skip."""
