"""The engine spec refuses what would change a unit or a shell command, and the example's placeholder pins;
the API key file is checked on the controller as ssh checks a private key."""

import os

import pytest

from k3ops.settings import host_errors
from k3ops.settings.engine import EngineSpec

B300 = {"hardware_profile": "b300x8"}
CPU = {"hardware_profile": "cpu"}
MODEL = {"repo_id": "moonshotai/Kimi-K3", "revision": "0123456789abcdef0123456789abcdef01234567", "name": "kimi-k3"}
DIGEST = "sha256:" + "a" * 64
VLLM = {"recipe": "vllm-b300x8", "image_digest": DIGEST}
LLAMA = {"recipe": "llama.cpp-gguf", "binary_url": "https://artifacts.example.com/llama-server.tar.gz",
         "binary_sha256": "c" * 64, "model_file": "UD-Q4_K_XL/Kimi-K3-UD-Q4_K_XL-00001-of-00013.gguf"}
ONE_LINE = "contains a line break or control character"


def engine_errors(engine: dict, host: dict = B300) -> list[str]:
    return host_errors("gpu-01", {**host, "model": MODEL, "engine": engine})


@pytest.mark.parametrize("image", ["vllm/vllm-openai:kimi-k3", "vllm/vllm-openai", "ubuntu",
                                   "registry.example.com:5000/team/vllm-openai:v0.11.0-rc1",
                                   "localhost:5000/vllm__x/a.b-c:T_1", "ghcr.io/org/sub/repo:latest"])
def test_image_references_pass(image):
    assert engine_errors({**VLLM, "image": image}) == []


@pytest.mark.parametrize("image", ["Vllm/vllm-openai:kimi-k3", "vllm/vllm-openai:", "vllm/vllm-openai:-x",
                                   "vllm/vllm-openai:" + "t" * 129, "vllm/vllm openai", "vllm//vllm-openai",
                                   "vllm/vllm-openai:x\nExecStartPre=/bin/sh -c reboot", "vllm/vllm-openai;reboot",
                                   "$(reboot)", "--privileged", "vllm/vllm-openai:kimi-k3\n"])
def test_anything_but_registry_repository_tag_is_not_an_image(image):
    assert engine_errors({**VLLM, "image": image}) == [
        f"gpu-01: engine.image: {image!r} is not an image reference like 'registry.example.com:5000/team/vllm:tag' "
        "(optional registry host[:port], lowercase repository, optional tag)"]


def test_a_digest_belongs_in_image_digest_not_in_the_image():
    assert engine_errors({**VLLM, "image": f"vllm/vllm-openai@{DIGEST}"}) == [
        f"gpu-01: engine.image: 'vllm/vllm-openai@{DIGEST}' carries a digest: give the image as "
        "registry/repository[:tag] and its digest in image_digest"]


def test_environment_values_may_hold_percent_and_dollar_for_the_unit_to_escape():
    engine = {**VLLM, "environment": {"NCCL_DEBUG": "INFO", "_X1": "%h $HOME 'quoted' \"too\""},
              "args": {"--tool-call-parser": "k3 %i $x", "--max-model-len": 32768}}
    assert engine_errors(engine) == []


@pytest.mark.parametrize(("engine", "flag", "field"), [
    (VLLM, "--host", "engine.host"), (VLLM, "--port", "engine.port"), (VLLM, "--model", "model.revision"),
    (VLLM, "--served-model-name", "model.name"), (VLLM, "--api-key", "engine.api_key_file"),
    (VLLM, "--config", "engine.args"), (LLAMA, "--alias", "model.name"), (LLAMA, "--host", "engine.host"),
    (LLAMA, "--api-key-file", "engine.api_key_file")])
def test_engine_args_cannot_set_what_the_spec_owns(engine, flag, field):
    """`--host 0.0.0.0` in args would listen on every interface while only engine.host decides whether a key
    is needed; a key in args sits in argv and a unit file every user reads."""
    [error] = engine_errors({**engine, "args": {flag: "0.0.0.0"}}, CPU if engine is LLAMA else B300)
    assert error.startswith(f"gpu-01: engine: args: {flag} is set by k3ops from {field}")


@pytest.mark.parametrize("value", ["--host=0.0.0.0", "-H", "--api-key"])
def test_an_engine_arg_value_that_reads_as_a_flag_is_refused(value):
    [error] = engine_errors({**VLLM, "args": {"--tool-call-parser": value}})
    assert error.startswith(f"gpu-01: engine.args: --tool-call-parser: {value!r} starts with '-'")


def test_negative_numbers_are_engine_arg_values():
    assert engine_errors({**VLLM, "args": {"--max-num-seqs": "-1", "--swap-space": "-0.5"}}) == []


@pytest.mark.parametrize("name", ["VLLM_API_KEY", "LLAMA_API_KEY", "HF_TOKEN"])
def test_a_secret_in_engine_environment_is_refused(name):
    [error] = engine_errors({**VLLM, "environment": {name: "0123456789abcdef"}})
    assert error.startswith(f"gpu-01: engine.environment: {name} is a secret")


@pytest.mark.parametrize("environment, message", [
    ({"A B": "1"}, "'A B' is not an environment variable name (letters, digits and _, not starting with a digit)"),
    ({"1X": "1"}, "'1X' is not an environment variable name"),
    ({"X-Y": "1"}, "'X-Y' is not an environment variable name"),
    ({"X\n": "1"}, "'X\\n' is not an environment variable name"),
    ({"X": "1\nExecStartPre=/bin/sh -c reboot"},
     f"X: '1\\nExecStartPre=/bin/sh -c reboot' {ONE_LINE} ('\\n'): give one line of plain text"),
    ({"X": "1\r2"}, f"X: '1\\r2' {ONE_LINE} ('\\r')"),
    ({"X": "1\x002"}, f"X: '1\\x002' {ONE_LINE} ('\\x00')"),
    ({"X": "1\u20282"}, f"X: '1\\u20282' {ONE_LINE} ('\\u2028')"),
])
def test_environment_names_are_variable_names_and_values_one_line(environment, message):
    errors = engine_errors({**VLLM, "environment": environment})
    assert len(errors) == 1 and errors[0].startswith(f"gpu-01: engine.environment: {message}"), errors


@pytest.mark.parametrize("args, message", [
    ({"--served-model-name": "k3\nExecStartPre=/bin/sh -c reboot"},
     f"--served-model-name: 'k3\\nExecStartPre=/bin/sh -c reboot' {ONE_LINE} ('\\n'): give one line of plain text"),
    ({"--max-model-len\n": 1}, "'--max-model-len\\n' is not a long flag like '--max-model-len'"),
    ({"--x": "\x1b[2J"}, f"--x: '\\x1b[2J' {ONE_LINE} ('\\x1b')"),
])
def test_argument_values_are_one_line(args, message):
    errors = engine_errors({**VLLM, "args": args})
    assert len(errors) == 1 and errors[0].startswith(f"gpu-01: engine.args: {message}"), errors


@pytest.mark.parametrize("model_file", ["../../etc/shadow", "/etc/shadow", "a/../../b.gguf", "x y.gguf", "x'.gguf",
                                        'x".gguf', "$(reboot).gguf", "x.gguf\n"])
def test_the_gguf_is_a_plain_path_inside_the_revision(model_file):
    assert engine_errors({**LLAMA, "model_file": model_file}, CPU) == [
        f"gpu-01: engine.model_file: {model_file!r} is not a relative path like "
        "'UD-Q4_K_XL/model-00001-of-00002.gguf' (letters, digits and ._+-/ only, no leading '/', no '..')"]


@pytest.mark.parametrize("url", ["https://artifacts.example.com/llama server.tgz", "https://a.example/x'.tgz",
                                 "https://a.example/x.tgz;reboot", "https://a.example/$(reboot)", "ftp://a.example/x",
                                 "https://a.example/x.tgz\n", "https://user:token@a.example/x.tgz"])
def test_a_binary_url_is_an_http_url_of_plain_characters(url):
    errors = engine_errors({**LLAMA, "binary_url": url}, CPU)
    assert errors[0].startswith(f"gpu-01: engine.binary_url: {url!r} is not an http(s) URL"), errors


def test_the_examples_placeholder_pins_are_refused_with_how_to_find_the_real_ones():
    assert engine_errors({**VLLM, "image_digest": "sha256:" + "0" * 64}) == [
        "gpu-01: engine.image_digest: replace the example's placeholder (all zeros) with the image's digest: "
        "`docker buildx imagetools inspect vllm/vllm-openai:kimi-k3` prints it"]
    assert engine_errors({**VLLM, "image": "mirror.example.com/vllm:k3", "image_digest": "sha256:" + "0" * 64}) == [
        "gpu-01: engine.image_digest: replace the example's placeholder (all zeros) with the image's digest: "
        "`docker buildx imagetools inspect mirror.example.com/vllm:k3` prints it"]
    assert engine_errors({**LLAMA, "binary_sha256": "0" * 64}, CPU) == [
        "gpu-01: engine.binary_sha256: replace the example's placeholder (all zeros) with the archive's sha256: "
        "`curl -fsSL https://artifacts.example.com/llama-server.tar.gz | sha256sum` prints it"]


def test_a_missing_digest_names_the_recipes_image():
    assert engine_errors({"recipe": "vllm-b300x8"}) == [
        "gpu-01: engine: image_digest: recipe 'vllm-b300x8' runs a container; pin its image by digest "
        "(`docker buildx imagetools inspect vllm/vllm-openai:kimi-k3` prints it)"]


API_KEY = "0123456789abcdef0123456789abcdef"


def llama_on_the_network(key_file) -> dict:
    return {**LLAMA, "host": "0.0.0.0", "api_key_file": str(key_file)}


def test_an_api_key_file_of_its_owners_alone_passes(tmp_path):
    key = tmp_path / "api-key"
    key.touch(mode=0o600)
    key.write_text(API_KEY + "\n")
    assert engine_errors(llama_on_the_network(key), CPU) == []


def test_a_missing_api_key_file_is_refused_with_how_to_make_one(tmp_path):
    key = tmp_path / "keys" / "api-key"
    assert engine_errors(llama_on_the_network(key), CPU) == [
        f"gpu-01: engine.api_key_file: {key} does not exist on this controller; make one with "
        f"`(umask 077; mkdir -p {key.parent} && openssl rand -hex 32 > {key})`"]


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o601])
def test_an_api_key_file_open_to_group_or_others_is_refused(tmp_path, mode):
    key = tmp_path / "api-key"
    key.write_text(API_KEY + "\n")
    key.chmod(mode)
    assert engine_errors(llama_on_the_network(key), CPU) == [
        f"gpu-01: engine.api_key_file: {key} is open to group or others (mode {mode:04o}); keep the key its owner's "
        f"alone: `chmod 600 {key}`"]


def test_an_api_key_file_that_is_not_a_regular_file_is_refused(tmp_path):
    assert engine_errors(llama_on_the_network(tmp_path), CPU) == [
        f"gpu-01: engine.api_key_file: {tmp_path} is not a regular file"]


def test_an_api_key_file_that_is_a_link_is_refused_even_to_a_good_key(tmp_path):
    """A link can be pointed at another file after the check; the deploy reads the file itself."""
    key = tmp_path / "api-key"
    key.touch(mode=0o600)
    key.write_text(API_KEY + "\n")
    (tmp_path / "link").symlink_to(key)
    assert engine_errors(llama_on_the_network(tmp_path / "link"), CPU) == [
        f"gpu-01: engine.api_key_file: {tmp_path / 'link'} is a symbolic link; name the file itself (a link can be "
        "pointed at another file after this check)"]


@pytest.mark.parametrize("text", [f"{API_KEY}\nLD_PRELOAD=/tmp/x.so\n", "short\n", f"{API_KEY} {API_KEY}\n",
                                  f"'{API_KEY}'\n", "\n"])
def test_an_api_key_file_of_more_or_other_than_one_key_line_is_refused(tmp_path, text):
    """The key lands as NAME=value in the environment file root's watchdog loads: a second line would add a
    variable (LD_PRELOAD) to a root process."""
    key = tmp_path / "api-key"
    key.touch(mode=0o600)
    key.write_text(text)
    [error] = engine_errors(llama_on_the_network(key), CPU)
    assert error.startswith(f"gpu-01: engine.api_key_file: {key} is not one line of 16 to 512 key characters")


def test_an_api_key_file_of_another_user_or_in_a_shared_directory_is_refused(tmp_path):
    key = tmp_path / "api-key"
    key.touch(mode=0o600)
    key.write_text(API_KEY + "\n")
    os.chown(key, 4321, 4321)
    assert engine_errors(llama_on_the_network(key), CPU) == [
        f"gpu-01: engine.api_key_file: {key} belongs to uid 4321, not to this user (uid {os.getuid()})"]
    os.chown(key, os.getuid(), os.getgid())
    tmp_path.chmod(0o777)
    [error] = engine_errors(llama_on_the_network(key), CPU)
    assert error.startswith(f"gpu-01: engine.api_key_file: {key} is in {tmp_path}, which another user can write")


def test_the_key_file_is_checked_where_the_inventory_is_validated_not_where_a_spec_is_built():
    """Deploy code and unit tests build specs of hosts whose key lives on another controller."""
    engine = EngineSpec.model_validate(llama_on_the_network("/nonexistent/api-key"))
    assert engine.api_key_file == "/nonexistent/api-key"


def test_every_recipes_own_image_is_a_reference_the_spec_accepts():
    from k3ops.engines.recipes import RECIPES

    images = {found.image for found in RECIPES.values() if found.image is not None}
    assert images and all(EngineSpec.model_validate({**VLLM, "image": image}).image == image for image in images)
