"""HRM puzzle datasets (Sudoku, Maze, ARC) in sapientinc/HRM's on-disk format; see ``format``."""
