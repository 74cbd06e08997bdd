"""ToolOrchestra: train and ship tool orchestrators."""
