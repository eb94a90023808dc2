"""`headroom deploy PLAN_ID --target T [--url URL]`: a stored plan rendered in-process from the local
database (SQLite and PostgreSQL) and through a live `headroom serve`, the same text as
GET /v1/plans/{id}/deploy and nothing else on stdout; an unknown plan or a missing checkpoint is
exit 2, an unreachable service exit 4."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from api.cli import main
from tests.api.conftest import ADMIN_KEY, free_port, serve_headroom
from tests.api.test_cli_plan import local_url, run, write  # noqa: F401 (local_url is a fixture)
from tests.api.test_deploy import CHAT


def test_deploy_in_process(local_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    request = write(tmp_path / "plan.json", CHAT)
    code, out, err = run(capsys, "--database-url", local_url, "plan", request)
    assert code == 0, err
    planned = json.loads(out)

    code, out, err = run(capsys, "--database-url", local_url, "deploy", planned["id"], "--target", "vllm")
    assert code == 0, err
    argv = shlex.split("\n".join(line for line in out.splitlines() if not line.startswith("#")).replace("\\\n", " "))
    assert argv[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B"]
    assert argv[argv.index("--max-num-seqs") + 1] == str(planned["plan"]["batch_limit"])
    assert argv[argv.index("--tensor-parallel-size") + 1] == str(planned["plan"]["tp"])

    code, out, err = run(capsys, "--database-url", local_url, "deploy", planned["id"], "--target", "k8s")
    assert code == 0, err
    assert [d["kind"] for d in yaml.safe_load_all(out)] == ["Deployment", "HorizontalPodAutoscaler", "Service"]

    code, out, err = run(capsys, "--database-url", local_url, "deploy", "0" * 32, "--target", "vllm")
    assert (code, out) == (2, "") and "no plan" in err
    with pytest.raises(SystemExit) as usage:  # --target is required: argparse's usage error, exit 2
        main(["deploy", planned["id"]])
    assert usage.value.code == 2


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve_headroom(tmp_path_factory.mktemp("live")) as served:
        yield served.base_url


def test_deploy_against_a_live_service(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HEADROOM_API_KEY", ADMIN_KEY)
    code, out, err = run(capsys, "plan", write(tmp_path / "plan.json", CHAT), "--url", server)
    assert code == 0, err
    planned = json.loads(out)
    code, out, err = run(capsys, "deploy", planned["id"], "--target", "sglang", "--url", server)
    assert code == 0, err
    assert out.startswith("# ") and "python3 -m sglang.launch_server" in out
    assert f"--max-running-requests {planned['plan']['batch_limit']}" in out

    cleared = httpx.patch(
        f"{server}/v1/models/llama-3.1-8b", json={"checkpoint": None}, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    )
    assert cleared.status_code == 200, cleared.text
    code, out, err = run(capsys, "deploy", planned["id"], "--target", "trt-llm", "--url", server)
    assert (code, out) == (2, "") and "`checkpoint`" in err


def test_an_unreachable_service_is_exit_4(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "deploy", "0" * 32, "--target", "k8s", "--url", f"http://127.0.0.1:{free_port()}")
    assert (code, out) == (4, "") and "cannot reach" in err
