"""The stages that turn the checked raw tables into graph edges, in flow order (see ``pipeline.flow``)."""
