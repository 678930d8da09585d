"""``FIREFLY_AGENTIC_MEMORY_BACKEND=redis``: the RedisStore built from the environment.

The top-level name ``firefly_orm.RedisStore`` is the store of ``firefly_orm.redis``.
"""

from __future__ import annotations

import uuid

import pytest

import firefly_orm
from firefly_orm.config import ConfigurationError, build_store, load_settings
from firefly_orm.errors import DatabaseConnectionError
from firefly_orm.redis import RedisStore
from firefly_orm.working import WorkingMemory

P = "FIREFLY_AGENTIC_MEMORY_"
SECRET = "s3cr3t-pw"


def test_top_level_name_is_the_store() -> None:
    assert firefly_orm.RedisStore is RedisStore
    assert "RedisStore" in firefly_orm.__all__


def test_settings_defaults_and_repr_hides_password(env: pytest.MonkeyPatch) -> None:
    env.setenv(P + "BACKEND", " Redis ")
    env.setenv(P + "REDIS_URL", f"redis://:{SECRET}@127.0.0.1:1/0")
    settings = load_settings()
    assert settings.backend == "redis"
    assert (settings.redis_prefix, settings.redis_socket_timeout) == ("firefly", 30.0)
    assert SECRET not in repr(settings)


def test_missing_url_names_the_variable(env: pytest.MonkeyPatch) -> None:
    env.setenv(P + "BACKEND", "redis")
    with pytest.raises(ConfigurationError, match=P + "REDIS_URL"):
        build_store()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("REDIS_URL", "http://h:1", "must be a string beginning with redis://"),
        ("REDIS_PREFIX", "bad prefix!", ""),
        ("REDIS_SOCKET_TIMEOUT", "0", "greater than 0"),
    ],
)
def test_bad_values_name_their_variable(
    env: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    env.setenv(P + "BACKEND", "redis")
    env.setenv(P + "REDIS_URL", f"redis://:{SECRET}@127.0.0.1:1/0")
    env.setenv(P + variable, value)
    with pytest.raises(ConfigurationError, match=P + variable) as caught:
        build_store()
    assert message in str(caught.value)
    assert SECRET not in str(caught.value)


def test_unreachable_server_names_the_variable_without_password(
    env: pytest.MonkeyPatch,
) -> None:
    env.setenv(P + "BACKEND", "redis")
    env.setenv(P + "REDIS_URL", f"redis://:{SECRET}@127.0.0.1:1/0")
    env.setenv(P + "REDIS_SOCKET_TIMEOUT", "2")
    with pytest.raises(DatabaseConnectionError, match=P + "REDIS_URL") as caught:
        build_store()
    assert SECRET not in str(caught.value)


@pytest.mark.redis
def test_build_redis_is_initialised(env: pytest.MonkeyPatch, redis_url: str) -> None:
    from redis_server import drop_prefix

    prefix = "t_" + uuid.uuid4().hex[:10]
    env.setenv(P + "BACKEND", "redis")
    env.setenv(P + "REDIS_URL", redis_url)
    env.setenv(P + "REDIS_PREFIX", prefix)
    env.setenv(P + "REDIS_SOCKET_TIMEOUT", "5")
    store = build_store()
    assert isinstance(store, RedisStore)
    try:
        assert store.prefix == prefix
        WorkingMemory(store=store, scope_id="r").set("k", {"v": 1})
        assert WorkingMemory(store=store, scope_id="r").get("k") == {"v": 1}
        assert store.client.keys(f"{prefix}:*")
    finally:
        store.close()
        drop_prefix(redis_url, prefix)


@pytest.mark.redis
def test_manager_from_config_on_redis(env: pytest.MonkeyPatch, redis_url: str) -> None:
    from redis_server import drop_prefix

    prefix = "t_" + uuid.uuid4().hex[:10]
    env.setenv(P + "BACKEND", "redis")
    env.setenv(P + "REDIS_URL", redis_url)
    env.setenv(P + "REDIS_PREFIX", prefix)
    manager = firefly_orm.MemoryManager.from_config()
    try:
        cid = manager.new_conversation()
        manager.add_turn(cid, "hi", "hello")
        again = firefly_orm.MemoryManager.from_config()
        assert [t.user_prompt for t in again.conversation.get_turns(cid)] == ["hi"]
    finally:
        drop_prefix(redis_url, prefix)
