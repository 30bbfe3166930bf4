"""BiLevel SCoRe: two-turn self-correction RL for code, with an optional guidance model and critics (seed 004)."""
