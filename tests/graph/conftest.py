"""Small repositories written to tmp_path, indexed for real."""

from __future__ import annotations

from pathlib import Path

import pytest


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for path, content in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    return root


PY_REPO = {
    "app/__init__.py": "",
    "app/auth/__init__.py": "from .tokens import verify_jwt\n",
    "app/auth/tokens.py": '"""Token checks."""\nimport hmac\n\n\ndef verify_jwt(token):\n    """Check a JWT."""\n    return decode(token)\n\n\ndef decode(token):\n    return hmac.new(b"k", token, "sha256")\n',
    "app/api/views.py": "from app.auth.tokens import verify_jwt\nfrom ..auth import tokens\n\n\nclass LoginView(Base):\n    def post(self, request):\n        return verify_jwt(request.token)\n\n\nclass Base:\n    pass\n",
    "app/api/urls.py": "from . import views\n\nurlpatterns = [views.LoginView]\n",
    "tests/test_views.py": "from app.api.views import LoginView\n\n\ndef test_login():\n    LoginView().post(None)\n",
    "node_modules/left-pad/index.js": "module.exports = 1;\n",
}

TS_REPO = {
    "tsconfig.json": '{\n  // comments are allowed\n  "compilerOptions": {"baseUrl": ".", "paths": {"@/*": ["src/*"], "@lib": ["src/lib/index.ts"]},},\n}\n',
    "src/lib/index.ts": 'export * from "./math";\nexport { format } from "./format";\n',
    "src/lib/math.ts": "export function add(a: number, b: number) { return a + b; }\n",
    "src/lib/format.ts": 'import { add } from "./math";\nexport const format = (n: number) => `${add(n, 0)}`;\n',
    "src/components/Counter.tsx": 'import { add } from "@/lib/math";\nimport { format } from "@lib";\nimport helpers from "../util";\nexport function Counter() { return <b>{format(add(1, 2))}</b>; }\n',
    "src/util/index.js": 'const x = require("./inner");\nmodule.exports = x;\n',
    "src/util/inner.js": "module.exports = {};\n",
    "src/app.ts": 'import { Counter } from "./components/Counter.js";\nexport class App extends Base implements Runnable { run() { Counter(); } }\n',
}


@pytest.fixture
def py_repo(tmp_path):
    return write_tree(tmp_path / "py", PY_REPO)


@pytest.fixture
def ts_repo(tmp_path):
    return write_tree(tmp_path / "ts", TS_REPO)
