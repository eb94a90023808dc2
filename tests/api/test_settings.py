"""Settings are read from the environment once, validated, and never at import time."""

from __future__ import annotations

import pytest

from api.settings import Settings, SettingsError


def test_defaults_and_overrides() -> None:
    defaults = Settings.from_env({})
    assert defaults.database_url == "sqlite:///./headroom.db"
    assert (defaults.admin_key, defaults.require_auth, defaults.log_level) == (None, False, "info")
    settings = Settings.from_env(
        {
            "HEADROOM_DATABASE_URL": "postgresql+psycopg://u@h/db",
            "HEADROOM_ADMIN_KEY": "a-long-enough-admin-key",
            "HEADROOM_REQUIRE_AUTH": "1",
            "HEADROOM_REQUEST_TIMEOUT_S": "12.5",
            "HEADROOM_SOLVER_TIME_LIMIT_S": "3",
            "HEADROOM_MAX_SIMULATED_REQUESTS": "1000",
            "HEADROOM_LOG_LEVEL": "DEBUG",
        }
    )
    assert settings == Settings(
        database_url="postgresql+psycopg://u@h/db",
        admin_key="a-long-enough-admin-key",
        require_auth=True,
        request_timeout_s=12.5,
        solver_time_limit_s=3.0,
        max_simulated_requests=1000,
        log_level="debug",
    )
    assert "a-long-enough-admin-key" not in repr(settings)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("HEADROOM_REQUIRE_AUTH", "maybe"),
        ("HEADROOM_REQUEST_TIMEOUT_S", "soon"),
        ("HEADROOM_REQUEST_TIMEOUT_S", "-1"),
        ("HEADROOM_SOLVER_TIME_LIMIT_S", "nan"),
        ("HEADROOM_MAX_SIMULATED_REQUESTS", "0"),
        ("HEADROOM_MAX_SIMULATED_REQUESTS", "1.5"),
        ("HEADROOM_LOG_LEVEL", "loud"),
        ("HEADROOM_ADMIN_KEY", "short"),
    ],
)
def test_bad_values_name_the_variable(variable: str, value: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        Settings.from_env({variable: value})


def test_settings_are_frozen() -> None:
    settings = Settings.from_env({})
    with pytest.raises(AttributeError):
        settings.require_auth = True  # type: ignore[misc]
