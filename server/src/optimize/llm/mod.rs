//! The LLM strategist and coder (being written).
