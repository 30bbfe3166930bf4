"""The completion-to-program extractor keeps definitions only."""

from __future__ import annotations

from distlab.recipes.lm.tasks import extract_code

FENCE = "```"


def test_fenced_code_with_prose_around():
    text = f"Here is my solution:\n\n{FENCE}python\ndef f(x):\n    return x + 1\n{FENCE}\n\nIt adds one to x."
    assert extract_code(text, "f") == "def f(x):\n    return x + 1\n"


def test_unfenced_code_with_prose_lines():
    text = "Sure. The function is:\ndef f(x):\n    return 2 * x\nThis doubles x, as asked."
    assert extract_code(text, "f") == "def f(x):\n    return 2 * x\n"


def test_truncated_trailing_definition_is_dropped():
    text = "def f(x):\n    return x\n\ndef g(y):\n    total = (y +"
    assert extract_code(text, "f") == "def f(x):\n    return x\n"
    assert extract_code(f"{FENCE}python\ndef f(x):\n    return x\n\nclass A:\n    def m(self", "f") \
        == "def f(x):\n    return x\n"


def test_main_block_prints_calls_and_model_asserts_are_dropped():
    text = ("def f(x):\n    print('inside is fine')\n    return x\n\nprint(f(3))\nf(4)\nassert f(3) == 3\n"
            "result = f(5)\nfor i in range(3):\n    print(i)\n"
            "if __name__ == '__main__':\n    assert f(1) == 1\n    print('ok')\n")
    assert extract_code(text, "f") == "def f(x):\n    print('inside is fine')\n    return x\n"


def test_imports_classes_decorators_and_constants_kept():
    text = (f"{FENCE}python\nimport math\nfrom functools import lru_cache\nLIMIT = 10 ** 9 + 7\nNAMES: list = ['a']\n"
            "INF = float('inf')\n\n@lru_cache(maxsize=None)\ndef f(n):\n    return math.factorial(n) % LIMIT\n\n"
            "class Box:\n    size = 3\n\n    def area(self):\n        return self.size ** 2\n"
            "data = open('x').read()\n"
            f"{FENCE}")
    code = extract_code(text, "f")
    for piece in ("import math", "from functools import lru_cache", "LIMIT = 10 ** 9 + 7", "NAMES: list = ['a']",
                  "INF = float('inf')", "@lru_cache(maxsize=None)\ndef f(n):", "class Box:", "return self.size"):
        assert piece in code
    assert "open(" not in code
    namespace: dict = {}
    exec(code, namespace)  # the kept part is runnable on its own
    assert namespace["f"](5) == 120 and namespace["Box"]().area() == 9


def test_multiline_strings_and_brackets_at_column_zero():
    text = 'def f():\n    s = """\nraw\n"""\n    return s\nTABLE = [\n    1,\n    2,\n]\n'
    namespace: dict = {}
    exec(extract_code(text, "f"), namespace)
    assert namespace["f"]() == "\nraw\n" and namespace["TABLE"] == [1, 2]


def test_several_blocks_and_definition_outside_the_fences():
    text = (f"Helper:\n{FENCE}python\ndef helper(x):\n    return x * 2\n{FENCE}\nMain:\n"
            f"{FENCE}\ndef f(x):\n    return helper(x)\n{FENCE}\nUsage:\n{FENCE}python\nprint(f(2))\n{FENCE}\n")
    assert extract_code(text, "f") == "def helper(x):\n    return x * 2\n\ndef f(x):\n    return helper(x)\n"
    outside = f"{FENCE}python\nimport os\n{FENCE}\ndef f(x):\n    return x\n"
    assert "def f(x)" in extract_code(outside, "f")
    other_language = f"{FENCE}bash\npip install x\n{FENCE}\ndef f(x):\n    return x\n"
    assert extract_code(other_language, "f") == "def f(x):\n    return x\n"


def test_nothing_usable_gives_empty_string():
    for text in ("", "   \n", "I am not able to solve this.", "print('hi')\nassert 1 == 1\n",
                 f"{FENCE}python\ndef f(x:\n{FENCE}", "def f(x):\n    return (x"):
        assert extract_code(text, "f") == ""


def test_long_chatty_completion_stays_cheap():
    import time

    prose = "\n".join(f"Step {i}: we consider the case where the list has {i} items." for i in range(2000))
    start = time.perf_counter()
    assert extract_code(prose + "\ndef f(x):\n    return x\n", "f") == "def f(x):\n    return x\n"
    assert time.perf_counter() - start < 1.0
