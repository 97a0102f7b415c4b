"""Live backends: real OpenAI-compatible serving engines (vLLM, vLLM-Ascend, SGLang, llama-server)."""
