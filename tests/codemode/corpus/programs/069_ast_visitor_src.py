import ast
import json

class Inspector(ast.NodeVisitor):
    def __init__(self):
        self.functions = []
        self.classes = []
        self.imports = []
        self.calls = []

    def visit_FunctionDef(self, node):
        self.functions.append((node.name, len(node.args.args), node.lineno))
        self.generic_visit(node)

    def visit_ClassDef(self, node):
        fields = [n.target.id for n in node.body if isinstance(n, ast.AnnAssign)]
        self.classes.append((node.name, fields))
        self.generic_visit(node)

    def visit_Import(self, node):
        self.imports += [a.name for a in node.names]

    def visit_ImportFrom(self, node):
        self.imports += [f"{node.module}.{a.name}" for a in node.names]

    def visit_Call(self, node):
        if isinstance(node.func, ast.Name):
            self.calls.append(node.func.id)
        self.generic_visit(node)

summary = {}
for path in json.loads(await tools.list_files(directory="src")):
    tree = ast.parse(await tools.read_file(path=path))
    v = Inspector()
    v.visit(tree)
    summary[path] = {"functions": v.functions, "classes": v.classes, "imports": v.imports, "calls": sorted(set(v.calls))}
    print(f"{path}: {len(v.functions)} funcs, {len(v.classes)} classes, imports={v.imports}")
return summary
