"""The local runner's interpreter layer: one test per escape technique (with variants), each refused
with a message naming what was refused, run through the engine against the real ``local`` runner.

The escapes of issue 17, point 5: frames and generator internals, ``operator.attrgetter`` and
``methodcaller``, ``functools`` wrappers around them, ``str.format`` field paths, private module
helpers, unlisted modules reached through allowed ones, and the standard library's own evaluators.
"""

from __future__ import annotations

import pytest

from mcp_code_mode.engine import CodeMode

from .conftest import Planted, assert_nothing_leaked

pytestmark = pytest.mark.anyio


async def _refused(engine: CodeMode, planted: Planted, code: str, *expected: str) -> None:
    result = await engine.execute(code, runner="local", timeout_ms=15000)
    assert_nothing_leaked(result, planted)
    assert not result.success, f"the script ran: {result.return_value!r} {result.output!r}"
    assert result.error is not None
    for text in expected:
        assert text in result.error.message, result.error.message


GENERATOR = "g = (x for x in [1])\n"


@pytest.mark.parametrize(
    "code",
    [
        GENERATOR + "g.gi_frame.f_locals['authorized_imports'].append('os')",
        GENERATOR + "f = g.gi_frame",
        GENERATOR + "getattr(g, 'gi_frame')",
        GENERATOR + "import functools\nfunctools.reduce(getattr, ['gi_frame', 'f_back'], g)",
        GENERATOR + "g.gi_code",
        GENERATOR + "g.gi_yieldfrom",
    ],
    ids=["gi_frame_f_locals", "gi_frame", "getattr_gi_frame", "reduce_getattr_f_back", "gi_code", "gi_yieldfrom"],
)
async def test_generator_frames_and_code_are_refused(attacked: CodeMode, planted: Planted, code: str) -> None:
    await _refused(attacked, planted, code, "Forbidden access to interpreter internals")


async def test_an_async_def_is_refused_so_no_coroutine_frame_exists(attacked: CodeMode, planted: Planted) -> None:
    await _refused(attacked, planted, "async def f():\n    pass\nf().cr_frame", "`async def` is not supported")


@pytest.mark.parametrize("name", ["cr_frame", "ag_frame", "tb_frame", "tb_next", "f_back", "f_globals"])
async def test_coroutine_traceback_and_frame_attributes_are_refused_on_any_object(
    attacked: CodeMode, planted: Planted, name: str
) -> None:
    code = f"class Box:\n    pass\nb = Box()\nb.{name}"
    await _refused(attacked, planted, code, f"interpreter internals: {name}")


@pytest.mark.parametrize(
    "code",
    [
        "try:\n    1/0\nexcept Exception as e:\n    t = e.__traceback__",
        "try:\n    1/0\nexcept Exception as e:\n    '{0.__traceback__.tb_frame}'.format(e)",
        "try:\n    1/0\nexcept Exception as e:\n    import operator\n    operator.attrgetter('__traceback__')(e)",
    ],
    ids=["attribute", "format", "attrgetter"],
)
async def test_a_caught_exceptions_traceback_is_refused(attacked: CodeMode, planted: Planted, code: str) -> None:
    await _refused(attacked, planted, code, "__traceback__")


SUBCLASSES = "__class__.__base__.__subclasses__"


@pytest.mark.parametrize(
    "code",
    [
        f"import operator\noperator.attrgetter({SUBCLASSES!r})(())",
        f"from operator import attrgetter\nattrgetter({SUBCLASSES!r})(())",
        f"import operator\nhelpers = {{'get': operator.attrgetter}}\nhelpers['get']({SUBCLASSES!r})(())",
        "from operator import attrgetter\nlist(map(attrgetter('gi_frame'), [(x for x in [1])]))",
        f"import functools, operator\nfunctools.partial(operator.attrgetter({SUBCLASSES!r}))()(())",
        "import functools, operator\nfunctools.partial(operator.attrgetter, '__class__')()(1)",
        "import typing\ntyping.operator.attrgetter('__class__')(1)",
    ],
    ids=["module", "from_import", "stored_in_dict", "map", "partial_of_getter", "partial_of_factory", "via_typing"],
)
async def test_attrgetter_paths_with_private_parts_are_refused(attacked: CodeMode, planted: Planted, code: str) -> None:
    await _refused(attacked, planted, code, "Forbidden attribute in operator.attrgetter")


@pytest.mark.parametrize(
    "code",
    [
        "import operator\noperator.methodcaller('__reduce_ex__', 2)(1)",
        "from operator import methodcaller\nlist(map(methodcaller('_get_command_stdout', 'id'), [1]))",
        "import functools, operator\nfunctools.partial(operator.methodcaller, '__subclasses__')()(object)",
    ],
    ids=["module", "map", "partial"],
)
async def test_methodcaller_of_private_names_is_refused(attacked: CodeMode, planted: Planted, code: str) -> None:
    await _refused(attacked, planted, code, "Forbidden method in operator.methodcaller")


async def test_methodcaller_reaching_a_module_through_getattr_is_refused(attacked: CodeMode, planted: Planted) -> None:
    code = "import uuid, operator\nlist(map(operator.methodcaller('system', 'id'), map(getattr, [uuid], ['os'])))"
    await _refused(attacked, planted, code, "Forbidden access to module: os")


@pytest.mark.parametrize(
    "code",
    [
        "'{0.__class__.__mro__}'.format(1)",
        "''.join(['{0.__init__', '.__globals__}']).format(call_tool)",
        "str.format('{0.__class__}', 1)",
        "'{a.__class__}'.format_map({'a': 1})",
        "f = '{0.__class__}'.format\nf(1)",
        "import string\nstring.Formatter().format('{0.__class__}', 1)",
        "import string\nstring.Formatter().get_field('0.__class__', (1,), {})",
        "list(map(str.format, ['{0.__class__}'], [1]))",
        "g = (x for x in [1])\n'{0.gi_frame}'.format(g)",
    ],
    ids=["literal", "built_string", "unbound", "format_map", "stored", "formatter", "get_field", "map", "gi_frame"],
)
async def test_format_field_paths_with_private_parts_are_refused(
    attacked: CodeMode, planted: Planted, code: str
) -> None:
    await _refused(attacked, planted, code, "Forbidden attribute in format field")


PRIVATE = "Forbidden access to private module attribute"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("import uuid\nuuid._get_command_stdout('id')", f"{PRIVATE}: uuid._get_command_stdout"),
        ("from uuid import _get_command_stdout", "Forbidden import of private name: uuid._get_command_stdout"),
        ("import random\nrandom._os", f"{PRIVATE}: random._os"),
        ("import zoneinfo\nzoneinfo._tzpath", f"{PRIVATE}: zoneinfo._tzpath"),
        ("import uuid\ngetattr(uuid, '_get_command_stdout')", f"{PRIVATE}: uuid._get_command_stdout"),
        ("import uuid, operator\noperator.attrgetter('_get_command_stdout')(uuid)", "in operator.attrgetter"),
    ],
    ids=["uuid_helper", "from_import", "random_os", "zoneinfo_internals", "getattr", "attrgetter"],
)
async def test_private_module_attributes_are_refused(
    attacked: CodeMode, planted: Planted, code: str, expected: str
) -> None:
    await _refused(attacked, planted, code, expected)


@pytest.mark.parametrize(
    ("code", "module"),
    [
        ("import uuid\nuuid.os.system('id')", "os"),
        ("from uuid import os", "os"),
        ("import typing\ntyping.sys.modules", "sys"),
        ("import dataclasses\ndataclasses.sys", "sys"),
        ("import dataclasses\ndataclasses.builtins", "builtins"),
        ("import dataclasses\ndataclasses.inspect", "inspect"),
        ("import calendar\ncalendar.sys", "sys"),
        ("import enum\nenum.bltns.open", "builtins"),
        ("import json\njson.codecs", "codecs"),
        ("import fnmatch\nfnmatch.os", "os"),
        ("import queue\nqueue.threading", "threading"),
        ("import uuid\ngetattr(uuid, 'os')", "os"),
    ],
    ids=lambda v: v if isinstance(v, str) and "\n" not in v else None,
)
async def test_unlisted_modules_reached_through_allowed_ones_are_refused(
    attacked: CodeMode, planted: Planted, code: str, module: str
) -> None:
    await _refused(attacked, planted, code, f"Forbidden access to module: {module}")


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (
            "import typing\nclass C:\n    x: \"__import__('os').getcwd()\"\ntyping.get_type_hints(C)",
            "string annotations",
        ),
        (
            "import functools\ndef f(x):\n    return x\nd = functools.singledispatch(f)\n"
            "class K:\n    a: \"__import__('os').getcwd()\"\nd.register(K())",
            "string annotations",
        ),
        ("import functools\nfunctools.singledispatchmethod(print)", "singledispatchmethod is not available"),
        ("import typing\ntyping.ForwardRef('1')._evaluate(None, None, set())", "ForwardRef._evaluate"),
        (
            "import dataclasses\n"
            "X = type('X', (), {'__annotations__': {'a=print(1) or 1': int}})\ndataclasses.dataclass(X)",
            "not an identifier",
        ),
        (
            "import functools\nclass Box:\n    pass\n"
            "functools.update_wrapper(Box(), print, assigned=('__globals__',), updated=())",
            "beyond the defaults",
        ),
    ],
    ids=["get_type_hints", "singledispatch_register", "singledispatchmethod", "forwardref", "dataclass", "wraps"],
)
async def test_the_standard_librarys_evaluators_are_refused(
    attacked: CodeMode, planted: Planted, code: str, expected: str
) -> None:
    await _refused(attacked, planted, code, expected)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (
            "class Box:\n    pass\nb = Box()\nb.__annotations__ = {}",
            "Forbidden assignment to attribute: __annotations__",
        ),
        ("def f():\n    pass\nsetattr(f, '__annotations__', {'x': '1'})", "Forbidden assignment to attribute"),
        ("import random\nr = random.Random()\nr._x = 1", "private attribute of a library object"),
        ("import random\nrandom.Random()._randbelow(3)", "private attribute of a library object"),
    ],
    ids=["dunder_assignment", "setattr_dunder", "library_private_write", "library_private_read"],
)
async def test_dunder_writes_and_library_privates_are_refused(
    attacked: CodeMode, planted: Planted, code: str, expected: str
) -> None:
    await _refused(attacked, planted, code, expected)


ORDINARY = """\
import collections, dataclasses, functools, json, operator, string
squares = [x * x for x in range(5)]
evens = list(x for x in range(10) if x % 2 == 0)
total = sum(x for x in range(4))
Point = collections.namedtuple('Point', 'x y')
p = Point(1, 2)._replace(y=5)
class Node:
    def __init__(self, value):
        self._value = value
    def value(self):
        return self._value
Pair = dataclasses.make_dataclass('Pair', [('a', int), ('b', int)])
pair = Pair(1, 2)
add = functools.partial(operator.add, 10)
text = "{0} {name:>6} {p.x}".format(7, name="n", p=p)
mapped = "{a}-{b}".format_map({"a": 1, "b": 2})
tpl = string.Formatter().format("{0:03d}", 5)
picked = operator.itemgetter(1, 0)(["a", "b"])
named = list(map(operator.attrgetter("x"), [p]))
upper = list(map(operator.methodcaller("upper"), ["a"]))
width = 8
fstr = f"{3.14159:.2f}|{'x':>{width}}"
{
    "squares": squares, "evens": evens, "total": total, "point": p._asdict(), "node": Node(3).value(),
    "pair": dataclasses.asdict(pair), "add": add(1), "text": text, "mapped": mapped, "tpl": tpl,
    "picked": picked, "named": named, "upper": upper, "fstr": fstr,
    "json": json.loads(json.dumps({"k": [1, 2]})), "reduce": functools.reduce(operator.mul, [1, 2, 3]),
    "getattr": getattr(p, "y"), "str": str(Node(1).value()),
}
"""


async def test_ordinary_idioms_still_work(attacked: CodeMode) -> None:
    result = await attacked.execute(ORDINARY, runner="local")
    assert result.success, result.error
    assert result.return_value == {
        "squares": [0, 1, 4, 9, 16],
        "evens": [0, 2, 4, 6, 8],
        "total": 6,
        "point": {"x": 1, "y": 5},
        "node": 3,
        "pair": {"a": 1, "b": 2},
        "add": 11,
        "text": "7      n 1",
        "mapped": "1-2",
        "tpl": "005",
        "picked": ["b", "a"],
        "named": [1],
        "upper": ["A"],
        "fstr": "3.14|       x",
        "json": {"k": [1, 2]},
        "reduce": 6,
        "getattr": 5,
        "str": "1",
    }


async def test_classes_calling_a_base_init_and_enums_still_work(attacked: CodeMode) -> None:
    code = (
        "import enum\nclass Color(enum.Enum):\n    RED = 1\n"
        "class Base:\n    def __init__(self, x):\n        self.x = x\n"
        "class Child(Base):\n    def __init__(self, x):\n        Base.__init__(self, x * 2)\n"
        "[Child(2).x, Color.RED.value, Color.RED.name, Color(1)._value_]"
    )
    result = await attacked.execute(code, runner="local")
    assert result.success, result.error
    assert result.return_value == [4, 1, "RED", 1]


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("class A:\n    pass\nsuper(A, A()).__class__", "Forbidden access to dunder attribute: __class__"),
        ("super(type, type).__subclasses__()", "Forbidden access to dunder attribute: __subclasses__"),
        ("class A:\n    def m(self):\n        return super().__getattribute__('x')\nA().m()", "__getattribute__"),
        (
            "def d(f):\n    return f.__globals__\n@d\ndef g():\n    pass",
            "Forbidden access to dunder attribute: __globals__",
        ),
        ("def d(f):\n    return getattr(f, '__closure__')\n@d\ndef g():\n    pass", "__closure__"),
        ("class A:\n    pass\ndef d(c):\n    return c.__subclasses__()\n@d\nclass B(A):\n    pass", "__subclasses__"),
        (
            "import random\nclass R(random.Random):\n    def m(self):\n        return super()._randbelow(3)\nR().m()",
            "private",
        ),
    ],
    ids=[
        "super_dunder",
        "super_of_type",
        "super_getattribute",
        "decorator_globals",
        "decorator_closure",
        "class_decorator",
        "super_private",
    ],
)
async def test_super_and_decorators_reach_nothing_a_plain_call_cannot(
    attacked: CodeMode, planted: Planted, code: str, expected: str
) -> None:
    await _refused(attacked, planted, code, expected)


async def test_print_cannot_write_to_a_file_object(attacked: CodeMode, planted: Planted) -> None:
    code = "f = open('out.txt', 'w')\nprint('x', file=f)"
    await _refused(attacked, planted, code, "unsupported keyword arguments: file")


async def test_a_dataclass_by_decorator_keeps_the_field_name_guard(attacked: CodeMode, planted: Planted) -> None:
    code = (
        "import dataclasses\n"
        "def named(c):\n    c.__annotations__['a=print(1) or 1'] = int\n    return c\n"
        "@dataclasses.dataclass\n@named\nclass X:\n    pass"
    )
    await _refused(attacked, planted, code, "__annotations__")
