"""Recurrent PPO (MLP, LSTM and cascaded-LSTM policies) with a FinRL-style stock-trading env."""
