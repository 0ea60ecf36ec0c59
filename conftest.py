"""Project conftest: the place to extend or override pytest-maka's fixtures and hooks for
the cohorts in this repository. For example, to log every lease:

    import pytest

    @pytest.fixture
    def executor_lease(executor_lease):
        def lease(request):
            print("leasing", request.cell.id, "attempt", request.attempt)
            return executor_lease(request)
        return lease

and to add a key to every record (the hook returns new top-level keys):

    def pytest_maka_record(record, cell):
        return {"team": "evals"}
"""
