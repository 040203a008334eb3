"""Documented import paths for the bridges (``agent_adapter.integrations.openai_agents``)."""
