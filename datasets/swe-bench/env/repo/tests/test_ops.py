from calc import add, clamp


def test_add():
    assert add(2, 3) == 5


def test_clamp_lower():
    assert clamp(-5, 0, 10) == 0
