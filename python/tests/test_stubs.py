"""The type stubs (gramian/__init__.pyi) describe the package as it is: every
public name, and each function's and estimator's parameters in order."""

import ast
import inspect
import pathlib

import gramian

STUB = pathlib.Path(gramian.__file__).with_name("__init__.pyi")


def _stub_definitions():
    tree = ast.parse(STUB.read_text())
    functions, classes = {}, {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            classes[node.name] = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
    return functions, classes


def _parameters(node):
    args = node.args
    return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg != "self"]


def test_package_ships_its_stubs_and_marker():
    assert STUB.exists()
    assert STUB.with_name("py.typed").exists()


def test_every_public_name_has_a_stub():
    functions, classes = _stub_definitions()
    text = STUB.read_text()
    for name in gramian.__all__:
        obj = getattr(gramian, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException) or inspect.ismodule(obj):
            assert f"as {name}" in text, name
        elif inspect.isclass(obj):
            assert name in classes, name
        else:
            assert name in functions, name


def test_stub_signatures_match_the_code():
    functions, classes = _stub_definitions()
    for name, node in functions.items():
        assert _parameters(node) == list(inspect.signature(getattr(gramian, name)).parameters), name
    for name, methods in classes.items():
        if name == "NeuralEKSVD" and not hasattr(gramian, name):
            continue  # built without the cargo feature `neural`
        cls = getattr(gramian, name)
        for method, node in methods.items():
            runtime = getattr(cls, method)
            assert _parameters(node) == [p for p in inspect.signature(runtime).parameters if p != "self"], f"{name}.{method}"
