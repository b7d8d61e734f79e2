"""The report in each form: findings (:mod:`.findings`), the report that holds them (:mod:`.report`), the HTML page
(:mod:`.html`, drawn with :mod:`.page`), JUnit XML (:mod:`.junit`) and the progress lines (:mod:`.progress`)."""
