"""The process inside the sandbox: run the program, then its tests, and print the token only if every test ran.

It imports nothing from distlab (it runs as ``python -I -S`` under an unprivileged uid that may not read the
installed package; the sandbox copies this file next to the runs) and keeps working on any Python 3.8+, because the
interpreter is whichever one that uid can execute.

Everything the verdict depends on (os.write, os._exit, type, id, the comparison operators, the builtins the tests
see) is captured before the program runs, so a program that patches builtins or modules changes nothing here. The
token arrives on stdin, never argv or the environment, and exists only as a local of :func:`main`.
"""

import _ast  # the C half of `ast`: importing `ast` itself costs ~10 ms of start-up per program
import builtins
import collections
import operator
import os
import sys

# Exit statuses read by the parent; only 0 *with the token on stdout* is a pass. Not 1 or 2: Python itself and
# util-linux's unshare (when the namespace's first process dies of a signal) exit with those.
OK, TEST_FAILED, PROGRAM_ERROR, MEMORY, SETUP_ERROR, EXIT_ATTEMPT, UNTRUSTED = 0, 11, 12, 13, 14, 15, 16

CMP, TRUTH = "__sbx_cmp__", "__sbx_truth__"  # dunder-style: never name-mangled inside a class body
OPS = {_ast.Eq: "==", _ast.NotEq: "!=", _ast.Lt: "<", _ast.LtE: "<=", _ast.Gt: ">", _ast.GtE: ">=",
       _ast.In: "in", _ast.NotIn: "not in", _ast.Is: "is", _ast.IsNot: "is not"}
LOCATION = ("lineno", "col_offset", "end_lineno", "end_col_offset")


def _map_children(node, fn):
    for name in node._fields:
        value = getattr(node, name, None)
        if isinstance(value, list):
            setattr(node, name, [fn(v) if isinstance(v, _ast.AST) else v for v in value])
        elif isinstance(value, _ast.AST):
            setattr(node, name, fn(value))
    return node


def _call(name, args):
    return _ast.Call(_ast.Name(name, _ast.Load()), args, [])


def _compares(node):
    """Every comparison becomes a call that refuses values whose type the program controls."""
    _map_children(node, _compares)
    if not isinstance(node, _ast.Compare):
        return node
    ops = _ast.Tuple([_ast.Constant(OPS[type(op)]) for op in node.ops], _ast.Load())
    return _call(CMP, [node.left, ops, _ast.Tuple(node.comparators, _ast.Load())])


def _guard(node):
    """The assert's truth value must itself come from a trusted value (a bare object's __bool__ could lie)."""
    if isinstance(node, _ast.BoolOp):
        node.values = [_guard(v) for v in node.values]
        return node
    if isinstance(node, _ast.UnaryOp) and isinstance(node.op, _ast.Not):
        node.operand = _guard(node.operand)
        return node
    if isinstance(node, _ast.Call) and isinstance(node.func, _ast.Name) and node.func.id == CMP:
        return node
    return _call(TRUTH, [node])


def _asserts(node):
    """Comparisons anywhere in the tests are checked (``if f(x) != y: raise`` too); an assert's verdict as well."""
    if isinstance(node, _ast.Assert):
        node.test = _guard(_compares(node.test))  # the message is left alone: it only runs once the test failed
        return node
    return _compares(node) if isinstance(node, _ast.Compare) else _map_children(node, _asserts)


def _locate(node, parent):
    """New nodes take the position of the nearest located ancestor, so tracebacks still point at the assert."""
    if "lineno" in node._attributes:
        if getattr(node, "lineno", None) is None:
            for attr in LOCATION:
                setattr(node, attr, getattr(parent, attr, None))
        else:
            parent = node
    _map_children(node, lambda child: _locate(child, parent))
    return node


def rewrite_tests(source, filename="tests.py"):
    """Compile ``source`` with every comparison and assert routed through the trusted checks (line numbers kept)."""
    tree = compile(source, filename, "exec", _ast.PyCF_ONLY_AST, dont_inherit=True)
    return compile(_locate(_asserts(tree), tree), filename, "exec", dont_inherit=True, optimize=0)


def make_checks(flag):
    """The two functions the rewritten tests call; a refused value fails the test and is recorded in ``flag``.

    Trusted means the *exact* built-in type (a subclass can override ``__eq__``), containers recursively; types are
    compared by identity so a metaclass cannot answer ``==`` either. Called before the program runs, so every
    builtin and operator used here is the original.
    """
    type_, id_, iter_, bool_, zip_, set_, str_, dict_ = type, id, iter, bool, zip, set, str, dict
    assertion_error, base_exception = AssertionError, BaseException
    scalars = {id_(t) for t in (int, float, complex, str, bytes, bool, type(None), type)}
    sequences = {id_(t) for t in (tuple, list, set, frozenset)}
    # Honest programs return these (MBPP's reference solutions do); their Python methods can be patched, so a
    # top-level one is copied into a plain dict with dict's own C code (OrderedDict thus compares unordered).
    dict_likes = {id_(t) for t in (collections.Counter, collections.defaultdict, collections.OrderedDict)}
    dict_items = dict.items
    contains = operator.contains
    funcs = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
             ">=": operator.ge, "in": lambda a, b: contains(b, a), "not in": lambda a, b: not contains(b, a),
             "is": operator.is_, "is not": operator.is_not}
    identity = ("is", "is not")

    def untrusted_part(value):
        """None if ``value`` is trusted all the way down, else the first part that is not."""
        stack, seen = [value], set_()
        while stack:
            x = stack.pop()
            t = id_(type_(x))
            if t in scalars:
                continue
            if id_(x) in seen:
                continue
            seen.add(id_(x))
            if t in sequences:
                stack.extend(iter_(x))
            elif type_(x) is dict_:
                stack.extend(iter_(x.keys()))
                stack.extend(iter_(x.values()))
            else:
                return (x,)
        return None

    def refuse(value):  # raise, not return False, which `assert not x == y` would turn into a pass
        try:
            name = type_(value).__name__
            name = name if type_(name) is str_ else "?"
        except base_exception:
            name = "?"
        flag.append(name)
        raise assertion_error("the tests compared a value of type %s, not a built-in value" % name)

    def plain(value):
        return dict_(dict_items(value)) if id_(type_(value)) in dict_likes else value

    def compare(left, ops, rights):
        for op, right in zip_(ops, rights):
            a, b = left, right
            if op not in identity:
                a, b = plain(a), plain(b)
                for v in (a, b):
                    bad = untrusted_part(v)
                    if bad is not None:
                        refuse(bad[0])
            if funcs[op](a, b) is not True:
                return False
            left = right
        return True

    def truth(value):
        value = plain(value)
        bad = untrusted_part(value)
        if bad is not None:
            refuse(bad[0])
        return bool_(value)

    return compare, truth


def main():
    """Everything after the program starts uses only locals bound here: the program can rebind this module's
    globals (it is ``__main__``), the builtins module and any other module."""
    write, exit_, read, type_, isinst, dict_, exec_ = os.write, os._exit, os.read, type, isinstance, dict, exec
    settrace, setprofile = sys.settrace, sys.setprofile
    stdout, stderr = sys.stdout, sys.stderr
    memory_error, system_exit, syntax_error, base_exception = MemoryError, SystemExit, SyntaxError, BaseException
    len_, str_, own_file = len, str, main.__code__.co_filename
    ok, test_failed, program_error, memory, exit_attempt, untrusted_code = \
        OK, TEST_FAILED, PROGRAM_ERROR, MEMORY, EXIT_ATTEMPT, UNTRUSTED
    cmp_name, truth_name = CMP, TRUTH
    pristine = dict_(builtins.__dict__)  # what the tests see, whatever the program does to `builtins`
    out, err = os.dup(1), os.dup(2)

    def flush():
        for stream in (stdout, stderr):
            try:
                stream.flush()
            except base_exception:
                pass

    def describe(exc):
        """A traceback without importing `traceback` (tens of ms of start-up, and the program may break imports).
        Programs are exec'd from strings, so there are no source lines to show anyway."""
        frames, tb = [], exc.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename != own_file:
                frames.append('  File "%s", line %s, in %s\n' % (code.co_filename, tb.tb_lineno, code.co_name))
            tb = tb.tb_next
        if len_(frames) > 40:
            frames[20:-20] = ["  ... %d frames ...\n" % (len_(frames) - 40)]
        lines = ["Traceback (most recent call last):\n"] + frames if frames else []
        if isinst(exc, syntax_error):
            lines.append('  File "%s", line %s\n    %s\n' % (exc.filename, exc.lineno, (exc.text or "").strip()))
        msg = str_(exc)
        return "".join(lines) + type_(exc).__name__ + (": " + msg if msg else "") + "\n"

    def finish(code, exc=None, where=""):
        flush()
        text = ""
        if exc is not None:
            try:
                text = describe(exc)
            except base_exception:
                text = "(unprintable exception)\n"
        try:
            write(err, ("sandbox: %s\n%s" % (where, text)).encode("utf-8", "replace")[-65536:])
        except base_exception:
            pass
        exit_(code)

    chunks = []
    while True:
        chunk = read(0, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    try:
        # token line, program length line, program, tests (no json: its import costs start-up time)
        token, size, rest = b"".join(chunks).split(b"\n", 2)
        program_src, tests_src = rest[:int(size)].decode(), rest[int(size):].decode()
        tests = rewrite_tests(tests_src, "tests.py")
    except BaseException as exc:  # the parent's input or the tests themselves are broken
        finish(SETUP_ERROR, exc, "cannot prepare the tests")
    chunks = chunk = rest = None
    try:
        program = compile(program_src, "program.py", "exec", dont_inherit=True, optimize=0)
    except BaseException as exc:
        finish(MEMORY if isinstance(exc, MemoryError) else PROGRAM_ERROR, exc, "the program does not compile")
    untrusted = []
    compare, truth = make_checks(untrusted)

    ns = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec_(program, ns)
    except base_exception as exc:
        token = None
        code = memory if isinst(exc, memory_error) else exit_attempt if isinst(exc, system_exit) else program_error
        finish(code, exc, "the program raised")

    settrace(None)  # a tracer left by the program could jump over the asserts
    setprofile(None)
    tests_ns = dict_(ns)  # the program's threads hold `ns`, not this copy
    tests_ns["__builtins__"] = dict_(pristine)
    tests_ns[cmp_name], tests_ns[truth_name] = compare, truth
    try:
        exec_(tests, tests_ns)
    except base_exception as exc:
        token = None
        code = untrusted_code if untrusted else memory if isinst(exc, memory_error) else \
            exit_attempt if isinst(exc, system_exit) else test_failed
        finish(code, exc, "a test failed")
    if untrusted:  # the tests caught the refusal themselves
        token = None
        finish(untrusted_code, None, "the tests compared a value of type %s, not a built-in value" % untrusted[0])
    flush()
    write(out, b"\n" + token + b"\n")
    exit_(ok)


if __name__ == "__main__":
    main()
