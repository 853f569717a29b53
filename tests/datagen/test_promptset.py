import json

from datagen.promptset import FILES, SPREAD, build_sets


def test_the_committed_prompt_sets_are_what_the_generator_writes():
    built = build_sets()
    for name, path in FILES.items():
        assert json.loads(path.read_text()) == built[name]


def test_each_record_carries_its_answer_in_the_right_form():
    for records in build_sets().values():
        assert len(records) == sum(SPREAD.values())
        for record in records:
            answer = record["answer"]
            if record["source"] == "knowledge":
                assert answer in "ABCDEFGHIJ" and "\nJ. " in record["conversations"][0]["value"]
            elif record["source"] == "science":
                assert answer in "ABCD" and "\nD) " in record["conversations"][0]["value"]
            else:
                assert 0 <= int(answer) <= 999
