"""The type hints (__init__.pyi) name every public name of the package and
every public method of its classes (no mypy here: an ast walk)."""
import ast
import inspect
import os

import rlock


def stub_names():
    path = os.path.join(os.path.dirname(rlock.__file__), "__init__.pyi")
    names = {}
    for n in ast.parse(open(path).read()).body:
        if isinstance(n, ast.ClassDef):
            names[n.name] = {m.name for m in n.body
                             if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
            names[n.name] |= {m.target.id for m in n.body if isinstance(m, ast.AnnAssign)}
            names[n.name] |= {t.id for m in n.body if isinstance(m, ast.Assign)
                              for t in m.targets}
        elif isinstance(n, ast.FunctionDef):
            names[n.name] = set()
        elif isinstance(n, ast.AnnAssign):
            names[n.target.id] = set()
        elif isinstance(n, ast.Assign):
            names.update({t.id: set() for t in n.targets})
    return names


def test_type_stub_covers_the_public_api():
    names = stub_names()
    assert [x for x in rlock.__all__ if x not in names] == []
    for name in rlock.__all__:
        obj = getattr(rlock, name)
        if not inspect.isclass(obj) or issubclass(obj, BaseException):
            continue
        own = {k for k, v in vars(obj).items() if not k.startswith("_")
               and (callable(v) or isinstance(v, property))}
        assert own <= names[name], (name, sorted(own - names[name]))
    assert {"set", "hset", "incrby", "delete", "script", "set_async",
            "script_async"} <= names["Guard"]
    assert {"check", "check_async"} <= names["FencedLock"]
