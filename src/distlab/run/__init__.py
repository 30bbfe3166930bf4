"""What a run writes: its directory, the metrics and logs, profiles and the closing report."""
