from pathlib import Path

LOGS = {"one.log": "a\nb\nc\n", "two.log": "d\ne\n"}


def test_logs_untouched():
    for name, content in LOGS.items():
        assert (Path("/app/logs") / name).read_text() == content


def test_line_count_file_exists():
    assert Path("/app/line_count.txt").is_file()


def test_line_count_value():
    assert Path("/app/line_count.txt").read_text().strip() == "5"
