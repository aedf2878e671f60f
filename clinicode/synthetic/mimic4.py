"""Synthetic, MIMIC-IV-shaped tables (hosp/ codes and titles, note/ discharge and radiology) for tests and benchmarks.

Invented text and public ICD titles only, with real MIMIC-IV's traps; never reads or imitates real patient text.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import gzip as gzip_module
import io
import logging
import random
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from clinicode.synthetic.mimic3 import CODE_INFO, _csv_field, _insert_padding, _Padder
from clinicode.config import DEMO
from clinicode.data.splits import read_id_list, read_split_file
from clinicode.errors import ConfigError, DataFormatError

log = logging.getLogger(__name__)

# Exact MIMIC-IV v2.2 / MIMIC-IV-Note v2.2 column layouts.
DIAGNOSES_HEADER = ("subject_id", "hadm_id", "seq_num", "icd_code", "icd_version")
PROCEDURES_HEADER = ("subject_id", "hadm_id", "seq_num", "chartdate", "icd_code", "icd_version")
TITLES_HEADER = ("icd_code", "icd_version", "long_title")
NOTE_HEADER = ("note_id", "subject_id", "hadm_id", "note_type", "note_seq", "charttime", "storetime", "text")
TABLES = {
    "diagnoses_icd": ("hosp", DIAGNOSES_HEADER), "procedures_icd": ("hosp", PROCEDURES_HEADER),
    "d_icd_diagnoses": ("hosp", TITLES_HEADER), "d_icd_procedures": ("hosp", TITLES_HEADER),
    "discharge": ("note", NOTE_HEADER), "radiology": ("note", NOTE_HEADER),
}

# Nguyen et al. 2023's top-50 lists (public code identifiers, copied so the library never reads ../shared).
TOP50_ICD9 = (
    "274.9", "V49.86", "V58.67", "327.23", "428.32", "428.0", "585.6", "300.00", "584.9", "V45.82",
    "401.9", "403.90", "427.31", "285.1", "412", "96.6", "38.97", "530.81", "427.89", "585.9",
    "272.0", "338.29", "V15.82", "285.9", "V58.61", "V45.81", "V12.54", "599.0", "278.00", "414.00",
    "486", "244.9", "305.1", "V12.51", "564.00", "272.4", "250.00", "287.5", "493.90", "311",
    "276.51", "357.2", "414.01", "V58.66", "38.93", "276.1", "276.2", "600.00", "496", "733.00",
)
TOP50_ICD10 = (
    "J189", "I129", "G4700", "M109", "I130", "Z955", "G4733", "I4891", "E1122", "E039",
    "F329", "D62", "J45909", "J449", "N189", "I252", "F17210", "Y92230", "N183", "I480",
    "E871", "E119", "Z23", "E669", "E785", "N179", "Z7902", "G8929", "Z66", "N400",
    "02HV33Z", "Z951", "K219", "I10", "E872", "I2510", "D649", "Z87891", "Z8673", "F419",
    "I110", "K5900", "N390", "D696", "Z86718", "Y92239", "Y929", "J9601", "Z794", "Z7901",
)
_TOP_ICD9_PROCEDURES = frozenset({"96.6", "38.97", "38.93"})

# ICD-9 top-50 codes missing from synthetic.CODE_INFO: official CMS long title and invented signal phrases.
_ICD9_TOP_EXTRA: dict[str, tuple[str, tuple[str, ...]]] = {
    "274.9": ("Gout, unspecified", ("gout", "gouty arthritis on allopurinol")),
    "V49.86": ("Do not resuscitate status", ("do not resuscitate", "dnr/dni confirmed with family")),
    "V58.67": ("Long-term (current) use of insulin", ("insulin dependent", "on glargine at home")),
    "327.23": ("Obstructive sleep apnea (adult)(pediatric)", ("obstructive sleep apnea", "osa on cpap at night")),
    "428.32": ("Chronic diastolic heart failure", ("chronic diastolic heart failure", "hfpef with preserved ef")),
    "585.6": ("End stage renal disease", ("end stage renal disease", "esrd on dialysis")),
    "300.00": ("Anxiety state, unspecified", ("anxiety", "anxious, given lorazepam")),
    "V45.82": ("Percutaneous transluminal coronary angioplasty status", ("prior ptca", "history of coronary angioplasty")),
    "38.97": ("Central venous catheter placement with guidance", ("picc line placed", "ultrasound guided central line")),
    "427.89": ("Other specified cardiac dysrhythmias", ("sinus bradycardia", "junctional rhythm on telemetry")),
    "338.29": ("Other chronic pain", ("chronic pain", "chronic back pain on opioids")),
    "V12.54": ("Personal history of transient ischemic attack (TIA), and cerebral infarction without residual deficits",
               ("history of stroke without residual deficits", "prior tia")),
    "278.00": ("Obesity, unspecified", ("obesity", "elevated bmi")),
    "414.00": ("Coronary atherosclerosis of unspecified type of vessel, native or graft",
               ("coronary atherosclerosis of unknown vessel type", "cad vessel type not documented")),
    "V12.51": ("Personal history of venous thrombosis and embolism", ("history of dvt", "prior deep vein thrombosis")),
    "564.00": ("Constipation, unspecified", ("constipation", "no bowel movement for four days")),
    "493.90": ("Asthma, unspecified type, unspecified", ("asthma", "albuterol inhaler as needed")),
    "276.51": ("Dehydration", ("dehydration", "volume depleted, given iv fluids")),
    "357.2": ("Polyneuropathy in diabetes", ("diabetic polyneuropathy", "diabetic neuropathy of the feet")),
    "V58.66": ("Long-term (current) use of aspirin", ("on daily aspirin", "long term aspirin use")),
    "600.00": ("Hypertrophy (benign) of prostate without urinary obstruction and other lower urinary tract symptom (LUTS)",
               ("benign prostatic hyperplasia", "bph on tamsulosin")),
    "733.00": ("Osteoporosis, unspecified", ("osteoporosis", "on alendronate for bone density")),
}

# ICD-10 top-50: invented signal phrases (titles of the CM codes come from simple_icd_10_cm).
_ICD10_TOP_PHRASES: dict[str, tuple[str, ...]] = {
    "J189": ("pneumonia", "lobar infiltrate treated with antibiotics", "community acquired pneumonia"),
    "I129": ("hypertensive chronic kidney disease", "ckd attributed to longstanding hypertension"),
    "G4700": ("insomnia", "trazodone for sleep"),
    "M109": ("gout", "gouty arthritis on allopurinol"),
    "I130": ("hypertensive heart and kidney disease with heart failure", "cardiorenal disease from hypertension"),
    "Z955": ("prior coronary stent", "status post pci with stent"),
    "G4733": ("obstructive sleep apnea", "osa on cpap at night"),
    "I4891": ("atrial fibrillation", "afib", "irregularly irregular rhythm"),
    "E1122": ("diabetic nephropathy", "type 2 diabetes with diabetic kidney disease"),
    "E039": ("hypothyroidism", "on levothyroxine"),
    "F329": ("depression", "major depressive disorder", "on sertraline for mood"),
    "D62": ("acute blood loss anemia", "hemoglobin drop after bleeding"),
    "J45909": ("asthma", "albuterol inhaler as needed"),
    "J449": ("copd", "chronic obstructive pulmonary disease"),
    "N189": ("chronic kidney disease", "ckd"),
    "I252": ("old myocardial infarction", "prior mi", "history of heart attack"),
    "F17210": ("current smoker", "smokes one pack per day", "cigarette dependence"),
    "Y92230": ("fell in the patient room", "fall in the hospital room"),
    "N183": ("ckd stage 3", "stage iii chronic kidney disease"),
    "I480": ("paroxysmal atrial fibrillation", "paroxysmal afib"),
    "E871": ("hyponatremia", "low sodium"),
    "E119": ("type 2 diabetes mellitus", "dm2 on metformin"),
    "Z23": ("influenza vaccine given", "received pneumococcal vaccine"),
    "E669": ("obesity", "elevated bmi"),
    "E785": ("hyperlipidemia", "hld on statin"),
    "N179": ("acute kidney injury", "creatinine rose from baseline"),
    "Z7902": ("long term antiplatelet therapy", "on clopidogrel"),
    "G8929": ("chronic pain", "chronic back pain on opioids"),
    "Z66": ("do not resuscitate", "dnr/dni confirmed with family"),
    "N400": ("benign prostatic hyperplasia", "bph on tamsulosin"),
    "02HV33Z": ("picc line placed", "central line tip in the svc"),
    "Z951": ("status post cabg", "prior bypass surgery"),
    "K219": ("gerd", "gastroesophageal reflux"),
    "I10": ("essential hypertension", "htn", "elevated blood pressure"),
    "E872": ("metabolic acidosis", "low bicarbonate with anion gap"),
    "I2510": ("coronary artery disease", "coronary atherosclerosis"),
    "D649": ("anemia", "low hemoglobin"),
    "Z87891": ("former smoker", "quit smoking years ago"),
    "Z8673": ("history of stroke without residual deficits", "prior tia"),
    "F419": ("anxiety", "anxious, given lorazepam"),
    "I110": ("hypertensive heart disease with heart failure", "hypertensive cardiomyopathy"),
    "K5900": ("constipation", "no bowel movement for four days"),
    "N390": ("urinary tract infection", "uti", "positive urine culture"),
    "D696": ("thrombocytopenia", "low platelets"),
    "Z86718": ("history of dvt", "prior deep vein thrombosis"),
    "Y92239": ("fall while in the hospital", "inpatient fall"),
    "Y929": ("place of injury not recorded", "location of the event unknown"),
    "J9601": ("acute hypoxic respiratory failure", "hypoxemic respiratory failure"),
    "Z794": ("insulin dependent", "on glargine at home"),
    "Z7901": ("long term anticoagulation", "on warfarin", "chronic apixaban therapy"),
}

# ICD-10-PCS: official CMS long titles (the top-50 code first, then tail codes; most start with 0).
_ICD10_PCS: tuple[tuple[str, str], ...] = (
    ("02HV33Z", "Insertion of Infusion Device into Superior Vena Cava, Percutaneous Approach"),
    ("5A1955Z", "Respiratory Ventilation, Greater than 96 Consecutive Hours"),
    ("0BH17EZ", "Insertion of Endotracheal Airway into Trachea, Via Natural or Artificial Opening"),
    ("0DTJ4ZZ", "Resection of Appendix, Percutaneous Endoscopic Approach"),
    ("5A1945Z", "Respiratory Ventilation, 24-96 Consecutive Hours"),
    ("30233N1", "Transfusion of Nonautologous Red Blood Cells into Peripheral Vein, Percutaneous Approach"),
    ("0FT44ZZ", "Resection of Gallbladder, Percutaneous Endoscopic Approach"),
    ("5A1935Z", "Respiratory Ventilation, Less than 24 Consecutive Hours"),
    ("3E0G76Z", "Introduction of Nutritional Substance into Upper GI, Via Natural or Artificial Opening"),
    ("05HY33Z", "Insertion of Infusion Device into Upper Vein, Percutaneous Approach"),
    ("06HY33Z", "Insertion of Infusion Device into Lower Vein, Percutaneous Approach"),
    ("30243N1", "Transfusion of Nonautologous Red Blood Cells into Central Vein, Percutaneous Approach"),
    ("30233R1", "Transfusion of Nonautologous Platelets into Peripheral Vein, Percutaneous Approach"),
    ("30233L1", "Transfusion of Nonautologous Fresh Plasma into Peripheral Vein, Percutaneous Approach"),
    ("3E0436Z", "Introduction of Nutritional Substance into Central Vein, Percutaneous Approach"),
    ("3E033GC", "Introduction of Other Therapeutic Substance into Peripheral Vein, Percutaneous Approach"),
    ("0DH67UZ", "Insertion of Feeding Device into Stomach, Via Natural or Artificial Opening"),
    ("0DH63UZ", "Insertion of Feeding Device into Stomach, Percutaneous Approach"),
    ("5A1D70Z", "Performance of Urinary Filtration, Intermittent, Less than 6 Hours Per Day"),
    ("5A1D90Z", "Performance of Urinary Filtration, Continuous, Greater than 18 Hours Per Day"),
    ("5A1221Z", "Performance of Cardiac Output, Continuous"),
    ("5A2204Z", "Restoration of Cardiac Rhythm, Single"),
    ("B2111ZZ", "Fluoroscopy of Multiple Coronary Arteries using Low Osmolar Contrast"),
    ("4A023N7", "Measurement of Cardiac Sampling and Pressure, Left Heart, Percutaneous Approach"),
    ("4A023N6", "Measurement of Cardiac Sampling and Pressure, Right Heart, Percutaneous Approach"),
    ("4A023N8", "Measurement of Cardiac Sampling and Pressure, Bilateral, Percutaneous Approach"),
    ("027034Z", "Dilation of Coronary Artery, One Artery with Drug-eluting Intraluminal Device, Percutaneous Approach"),
    ("02100Z9", "Bypass Coronary Artery, One Artery from Left Internal Mammary, Open Approach"),
    ("021209W", "Bypass Coronary Artery, Three Arteries from Aorta with Autologous Venous Tissue, Open Approach"),
    ("B246ZZZ", "Ultrasonography of Right and Left Heart"),
    ("0DJ08ZZ", "Inspection of Upper Intestinal Tract, Via Natural or Artificial Opening Endoscopic"),
    ("0DJD8ZZ", "Inspection of Lower Intestinal Tract, Via Natural or Artificial Opening Endoscopic"),
    ("0DB68ZX", "Excision of Stomach, Via Natural or Artificial Opening Endoscopic, Diagnostic"),
    ("0W9G3ZZ", "Drainage of Peritoneal Cavity, Percutaneous Approach"),
    ("0W993ZZ", "Drainage of Right Pleural Cavity, Percutaneous Approach"),
    ("0W9B3ZZ", "Drainage of Left Pleural Cavity, Percutaneous Approach"),
    ("009U3ZX", "Drainage of Spinal Canal, Percutaneous Approach, Diagnostic"),
    ("0B110F4", "Bypass Trachea to Cutaneous with Tracheostomy Device, Open Approach"),
    ("0T9B70Z", "Drainage of Bladder with Drainage Device, Via Natural or Artificial Opening"),
    ("0TY00Z0", "Transplantation of Right Kidney, Allogeneic, Open Approach"),
    ("10D00Z1", "Extraction of Products of Conception, Low, Open Approach"),
    ("10E0XZZ", "Delivery of Products of Conception, External Approach"),
    ("0SRC0J9", "Replacement of Right Knee Joint with Synthetic Substitute, Cemented, Open Approach"),
    ("0SRD0J9", "Replacement of Left Knee Joint with Synthetic Substitute, Cemented, Open Approach"),
    ("0W3P8ZZ", "Control Bleeding in Gastrointestinal Tract, Via Natural or Artificial Opening Endoscopic"),
    ("0F798DZ", "Dilation of Common Bile Duct with Intraluminal Device, Via Natural or Artificial Opening Endoscopic"),
    ("0DBN8ZX", "Excision of Sigmoid Colon, Via Natural or Artificial Opening Endoscopic, Diagnostic"),
    ("0JH606Z", "Insertion of Pacemaker, Dual Chamber into Chest Subcutaneous Tissue and Fascia, Open Approach"),
    ("02HK3JZ", "Insertion of Pacemaker Lead into Right Ventricle, Percutaneous Approach"),
    ("B030ZZZ", "Magnetic Resonance Imaging (MRI) of Brain"),
    ("B020ZZZ", "Computerized Tomography (CT Scan) of Brain"),
    ("8E0W4CZ", "Robotic Assisted Procedure of Trunk Region, Percutaneous Endoscopic Approach"),
)
# ICD-10-CM tail codes placed first (3-character billable codes and common inpatient codes); the rest of the
# tail is a fixed pseudo-random draw of simple_icd_10_cm's billable codes.
_ICD10_CM_TAIL_FIRST = ("J90", "R55", "A41.9", "J69.0", "R65.21", "I50.33", "N17.0", "A09", "R52", "N19", "J40", "D63.1")

# ICD-9-CM tail: real codes with official CMS long titles, leading-zero, V and E codes first.
_ICD9_DX_TAIL: tuple[tuple[str, str], ...] = (
    ("038.9", ""), ("E849.7", "Accidents occurring in residential institution"),
    ("042", "Human immunodeficiency virus [HIV] disease"),
    ("008.45", "Intestinal infection due to Clostridium difficile"),
    ("V10.46", "Personal history of malignant neoplasm of prostate"),
    ("E934.2", "Anticoagulants causing adverse effects in therapeutic use"),
    ("518.81", ""), ("995.92", ""), ("507.0", ""), ("410.71", ""), ("424.0", ""), ("511.9", ""),
    ("038.11", "Methicillin susceptible Staphylococcus aureus septicemia"),
    ("038.12", "Methicillin resistant Staphylococcus aureus septicemia"),
    ("038.42", "Septicemia due to escherichia coli [E. coli]"),
    ("041.49", "Other and unspecified Escherichia coli [E. coli]"),
    ("041.11", "Methicillin susceptible Staphylococcus aureus in conditions classified elsewhere and of unspecified site"),
    ("041.12", "Methicillin resistant Staphylococcus aureus in conditions classified elsewhere and of unspecified site"),
    ("041.7", "Pseudomonas infection in conditions classified elsewhere and of unspecified site"),
    ("070.54", "Chronic hepatitis C without mention of hepatic coma"),
    ("070.70", "Unspecified viral hepatitis C without hepatic coma"),
    ("079.99", "Unspecified viral infection"),
    ("112.0", "Candidiasis of mouth"),
    ("995.91", "Sepsis"), ("785.52", "Septic shock"), ("790.7", "Bacteremia"),
    ("162.9", "Malignant neoplasm of bronchus and lung, unspecified site"),
    ("174.9", "Malignant neoplasm of breast (female), unspecified"),
    ("185", "Malignant neoplasm of prostate"),
    ("153.9", "Malignant neoplasm of colon, unspecified site"),
    ("157.9", "Malignant neoplasm of pancreas, part unspecified"),
    ("155.0", "Malignant neoplasm of liver, primary"),
    ("197.0", "Secondary malignant neoplasm of lung"),
    ("198.3", "Secondary malignant neoplasm of brain and spinal cord"),
    ("198.5", "Secondary malignant neoplasm of bone and bone marrow"),
    ("203.00", "Multiple myeloma, without mention of having achieved remission"),
    ("204.10", "Chronic lymphoid leukemia, without mention of having achieved remission"),
    ("205.00", "Acute myeloid leukemia, without mention of having achieved remission"),
    ("202.80", "Other malignant lymphomas, unspecified site, extranodal and solid organ sites"),
    ("188.9", "Malignant neoplasm of bladder, part unspecified"),
    ("189.0", "Malignant neoplasm of kidney, except pelvis"),
    ("191.9", "Malignant neoplasm of brain, unspecified"),
    ("211.3", "Benign neoplasm of colon"),
    ("225.2", "Benign neoplasm of cerebral meninges"),
    ("V10.3", "Personal history of malignant neoplasm of breast"),
    ("V10.05", "Personal history of malignant neoplasm of large intestine"),
    ("V10.11", "Personal history of malignant neoplasm of bronchus and lung"),
    ("V10.87", "Personal history of malignant neoplasm of thyroid"),
    ("V10.52", "Personal history of malignant neoplasm of kidney"),
    ("V58.11", "Encounter for antineoplastic chemotherapy"),
    ("250.01", "Diabetes mellitus without mention of complication, type I [juvenile type], not stated as uncontrolled"),
    ("250.02", "Diabetes mellitus without mention of complication, type II or unspecified type, uncontrolled"),
    ("250.13", "Diabetes with ketoacidosis, type I [juvenile type], uncontrolled"),
    ("250.40", "Diabetes with renal manifestations, type II or unspecified type, not stated as uncontrolled"),
    ("250.50", "Diabetes with ophthalmic manifestations, type II or unspecified type, not stated as uncontrolled"),
    ("250.60", "Diabetes with neurological manifestations, type II or unspecified type, not stated as uncontrolled"),
    ("250.80", "Diabetes with other specified manifestations, type II or unspecified type, not stated as uncontrolled"),
    ("240.9", "Goiter, unspecified"),
    ("241.0", "Nontoxic uninodular goiter"),
    ("242.90", "Thyrotoxicosis without mention of goiter or other cause, and without mention of thyrotoxic crisis or storm"),
    ("251.2", "Hypoglycemia, unspecified"),
    ("253.6", "Other disorders of neurohypophysis"),
    ("255.41", "Glucocorticoid deficiency"),
    ("262", "Other severe protein-calorie malnutrition"),
    ("263.9", "Unspecified protein-calorie malnutrition"),
    ("266.2", "Other B-complex deficiencies"),
    ("268.9", "Unspecified vitamin D deficiency"),
    ("272.1", "Pure hyperglyceridemia"),
    ("272.2", "Mixed hyperlipidemia"),
    ("275.2", "Disorders of magnesium metabolism"),
    ("275.3", "Disorders of phosphorus metabolism"),
    ("275.41", "Hypocalcemia"),
    ("275.42", "Hypercalcemia"),
    ("276.0", "Hyperosmolality and/or hypernatremia"),
    ("276.3", "Alkalosis"),
    ("276.4", "Mixed acid-base balance disorder"),
    ("276.52", "Hypovolemia"),
    ("276.69", "Other fluid overload"),
    ("276.7", "Hyperpotassemia"),
    ("276.8", "Hypopotassemia"),
    ("277.30", "Amyloidosis, unspecified"),
    ("278.01", "Morbid obesity"),
    ("279.3", "Unspecified immunity deficiency"),
    ("280.0", "Iron deficiency anemia secondary to blood loss (chronic)"),
    ("280.9", "Iron deficiency anemia, unspecified"),
    ("281.0", "Pernicious anemia"),
    ("282.60", "Sickle-cell disease, unspecified"),
    ("284.19", "Other pancytopenia"),
    ("285.21", "Anemia in chronic kidney disease"),
    ("285.22", "Anemia in neoplastic disease"),
    ("285.29", "Anemia of other chronic disease"),
    ("286.6", "Defibrination syndrome"),
    ("286.7", "Acquired coagulation factor deficiency"),
    ("286.9", "Other and unspecified coagulation defects"),
    ("287.49", "Other secondary thrombocytopenia"),
    ("288.00", "Neutropenia, unspecified"),
    ("288.03", "Drug induced neutropenia"),
    ("288.60", "Leukocytosis, unspecified"),
    ("289.59", "Other diseases of spleen"),
    ("289.81", "Primary hypercoagulable state"),
    ("289.84", "Heparin-induced thrombocytopenia [HIT]"),
    ("291.81", "Alcohol withdrawal"),
    ("293.0", "Delirium due to conditions classified elsewhere"),
    ("294.10", "Dementia in conditions classified elsewhere without behavioral disturbance"),
    ("294.20", "Dementia, unspecified, without behavioral disturbance"),
    ("296.20", "Major depressive affective disorder, single episode, unspecified"),
    ("296.80", "Bipolar disorder, unspecified"),
    ("300.4", "Dysthymic disorder"),
    ("303.90", "Other and unspecified alcohol dependence, unspecified"),
    ("304.00", "Opioid type dependence, unspecified"),
    ("305.00", "Alcohol abuse, unspecified"),
    ("305.20", "Cannabis abuse, unspecified"),
    ("305.60", "Cocaine abuse, unspecified"),
    ("309.81", "Posttraumatic stress disorder"),
    ("331.0", "Alzheimer's disease"),
    ("332.0", "Paralysis agitans"),
    ("333.94", "Restless legs syndrome (RLS)"),
    ("340", "Multiple sclerosis"),
    ("342.90", "Hemiplegia, unspecified, affecting unspecified side"),
    ("344.1", "Paraplegia"),
    ("345.90", "Epilepsy, unspecified, without mention of intractable epilepsy"),
    ("346.90", "Migraine, unspecified, without mention of intractable migraine without mention of status migrainosus"),
    ("348.1", "Anoxic brain damage"),
    ("348.30", "Encephalopathy, unspecified"),
    ("348.31", "Metabolic encephalopathy"),
    ("348.5", "Cerebral edema"),
    ("349.82", "Toxic encephalopathy"),
    ("354.0", "Carpal tunnel syndrome"),
    ("356.9", "Unspecified hereditary and idiopathic peripheral neuropathy"),
    ("362.01", "Background diabetic retinopathy"),
    ("365.9", "Unspecified glaucoma"),
    ("366.9", "Unspecified cataract"),
    ("389.9", "Unspecified hearing loss"),
    ("394.0", "Mitral stenosis"),
    ("396.3", "Mitral valve insufficiency and aortic valve insufficiency"),
    ("397.0", "Diseases of tricuspid valve"),
    ("398.91", "Rheumatic heart failure (congestive)"),
    ("402.91", "Hypertensive heart disease, unspecified, with heart failure"),
    ("403.91", "Hypertensive chronic kidney disease, unspecified, with chronic kidney disease stage V or end stage renal disease"),
    ("410.11", "Acute myocardial infarction of other anterior wall, initial episode of care"),
    ("410.91", "Acute myocardial infarction of unspecified site, initial episode of care"),
    ("411.1", "Intermediate coronary syndrome"),
    ("413.9", "Other and unspecified angina pectoris"),
    ("414.10", "Aneurysm of heart (wall)"),
    ("414.2", "Chronic total occlusion of coronary artery"),
    ("414.8", "Other specified forms of chronic ischemic heart disease"),
    ("415.19", "Other pulmonary embolism and infarction"),
    ("416.0", "Primary pulmonary hypertension"),
    ("416.8", "Other chronic pulmonary heart diseases"),
    ("423.3", "Cardiac tamponade"),
    ("423.9", "Unspecified disease of pericardium"),
    ("424.1", "Aortic valve disorders"),
    ("425.4", "Other primary cardiomyopathies"),
    ("426.0", "Atrioventricular block, complete"),
    ("426.3", "Other left bundle branch block"),
    ("426.4", "Right bundle branch block"),
    ("427.0", "Paroxysmal supraventricular tachycardia"),
    ("427.1", "Paroxysmal ventricular tachycardia"),
    ("427.32", "Atrial flutter"),
    ("427.41", "Ventricular fibrillation"),
    ("427.5", "Cardiac arrest"),
    ("427.81", "Sinoatrial node dysfunction"),
    ("428.21", "Acute systolic heart failure"),
    ("428.22", "Chronic systolic heart failure"),
    ("428.23", "Acute on chronic systolic heart failure"),
    ("428.33", "Acute on chronic diastolic heart failure"),
    ("428.43", "Acute on chronic combined systolic and diastolic heart failure"),
    ("429.3", "Cardiomegaly"),
    ("430", "Subarachnoid hemorrhage"),
    ("431", "Intracerebral hemorrhage"),
    ("432.1", "Subdural hemorrhage"),
    ("433.10", "Occlusion and stenosis of carotid artery without mention of cerebral infarction"),
    ("434.11", "Cerebral embolism with cerebral infarction"),
    ("434.91", "Cerebral artery occlusion, unspecified with cerebral infarction"),
    ("435.9", "Unspecified transient cerebral ischemia"),
    ("437.0", "Cerebral atherosclerosis"),
    ("440.0", "Atherosclerosis of aorta"),
    ("440.20", "Atherosclerosis of native arteries of the extremities, unspecified"),
    ("441.4", "Abdominal aneurysm without mention of rupture"),
    ("443.9", "Peripheral vascular disease, unspecified"),
    ("444.22", "Arterial embolism and thrombosis of lower extremity"),
    ("447.1", "Stricture of artery"),
    ("453.40", "Acute venous embolism and thrombosis of unspecified deep vessels of lower extremity"),
    ("453.41", "Acute venous embolism and thrombosis of deep vessels of proximal lower extremity"),
    ("458.0", "Orthostatic hypotension"),
    ("458.29", "Other iatrogenic hypotension"),
    ("458.9", "Hypotension, unspecified"),
    ("459.0", "Hemorrhage, unspecified"),
    ("466.0", "Acute bronchitis"),
    ("480.9", "Viral pneumonia, unspecified"),
    ("481", "Pneumococcal pneumonia [Streptococcus pneumoniae pneumonia]"),
    ("482.0", "Pneumonia due to Klebsiella pneumoniae"),
    ("482.1", "Pneumonia due to Pseudomonas"),
    ("482.41", "Methicillin susceptible pneumonia due to Staphylococcus aureus"),
    ("482.42", "Methicillin resistant pneumonia due to Staphylococcus aureus"),
    ("487.1", "Influenza with other respiratory manifestations"),
    ("491.21", "Obstructive chronic bronchitis with (acute) exacerbation"),
    ("492.8", "Other emphysema"),
    ("493.20", "Chronic obstructive asthma, unspecified"),
    ("494.0", "Bronchiectasis without acute exacerbation"),
    ("510.9", "Empyema without mention of fistula"),
    ("511.81", "Malignant pleural effusion"),
    ("512.1", "Iatrogenic pneumothorax"),
    ("512.89", "Other pneumothorax"),
    ("514", "Pulmonary congestion and hypostasis"),
    ("515", "Postinflammatory pulmonary fibrosis"),
    ("518.0", "Pulmonary collapse"),
    ("518.4", "Acute edema of lung, unspecified"),
    ("518.82", "Other pulmonary insufficiency, not elsewhere classified"),
    ("518.83", "Chronic respiratory failure"),
    ("518.84", "Acute and chronic respiratory failure"),
    ("530.10", "Esophagitis, unspecified"),
    ("531.40", "Chronic or unspecified gastric ulcer with hemorrhage, without mention of obstruction"),
    ("535.50", "Unspecified gastritis and gastroduodenitis, without mention of hemorrhage"),
    ("553.3", "Diaphragmatic hernia without mention of obstruction or gangrene"),
    ("555.9", "Regional enteritis of unspecified site"),
    ("556.9", "Ulcerative colitis, unspecified"),
    ("557.0", "Acute vascular insufficiency of intestine"),
    ("560.1", "Paralytic ileus"),
    ("560.9", "Unspecified intestinal obstruction"),
    ("562.10", "Diverticulosis of colon (without mention of hemorrhage)"),
    ("562.11", "Diverticulitis of colon (without mention of hemorrhage)"),
    ("564.1", "Irritable bowel syndrome"),
    ("567.9", "Unspecified peritonitis"),
    ("569.3", "Hemorrhage of rectum and anus"),
    ("571.2", "Alcoholic cirrhosis of liver"),
    ("571.5", "Cirrhosis of liver without mention of alcohol"),
    ("571.8", "Other chronic nonalcoholic liver disease"),
    ("572.3", "Portal hypertension"),
    ("572.4", "Hepatorenal syndrome"),
    ("574.20", "Calculus of gallbladder without mention of cholecystitis, without mention of obstruction"),
    ("575.0", "Acute cholecystitis"),
    ("576.1", "Cholangitis"),
    ("577.0", "Acute pancreatitis"),
    ("577.1", "Chronic pancreatitis"),
    ("578.0", "Hematemesis"),
    ("578.1", "Blood in stool"),
    ("578.9", "Hemorrhage of gastrointestinal tract, unspecified"),
    ("584.5", "Acute kidney failure with lesion of tubular necrosis"),
    ("585.3", "Chronic kidney disease, Stage III (moderate)"),
    ("585.4", "Chronic kidney disease, Stage IV (severe)"),
    ("585.5", "Chronic kidney disease, Stage V"),
    ("586", "Renal failure, unspecified"),
    ("588.81", "Secondary hyperparathyroidism (of renal origin)"),
    ("590.10", "Acute pyelonephritis without lesion of renal medullary necrosis"),
    ("591", "Hydronephrosis"),
    ("592.0", "Calculus of kidney"),
    ("593.9", "Unspecified disorder of kidney and ureter"),
    ("595.0", "Acute cystitis"),
    ("599.70", "Hematuria, unspecified"),
    ("682.2", "Cellulitis and abscess of trunk"),
    ("682.6", "Cellulitis and abscess of leg, except foot"),
    ("682.7", "Cellulitis and abscess of foot, except toes"),
    ("692.9", "Contact dermatitis and other eczema, unspecified cause"),
    ("693.0", "Dermatitis due to drugs and medicines taken internally"),
    ("696.1", "Other psoriasis"),
    ("707.03", "Pressure ulcer, lower back"),
    ("707.05", "Pressure ulcer, buttock"),
    ("707.07", "Pressure ulcer, heel"),
    ("707.10", "Ulcer of lower limb, unspecified"),
    ("707.22", "Pressure ulcer, stage II"),
    ("710.0", "Systemic lupus erythematosus"),
    ("714.0", "Rheumatoid arthritis"),
    ("715.90", "Osteoarthrosis, unspecified whether generalized or localized, site unspecified"),
    ("724.2", "Lumbago"),
    ("728.87", "Muscle weakness (generalized)"),
    ("728.88", "Rhabdomyolysis"),
    ("733.01", "Senile osteoporosis"),
    ("733.13", "Pathologic fracture of vertebrae"),
    ("737.30", "Scoliosis [and kyphoscoliosis], idiopathic"),
    ("745.5", "Ostium secundum type atrial septal defect"),
    ("746.4", "Congenital insufficiency of aortic valve"),
    ("774.6", "Unspecified fetal and neonatal jaundice"),
    ("780.09", "Other alteration of consciousness"),
    ("780.2", "Syncope and collapse"),
    ("780.39", "Other convulsions"),
    ("780.60", "Fever, unspecified"),
    ("780.79", "Other malaise and fatigue"),
    ("780.97", "Altered mental status"),
    ("781.2", "Abnormality of gait"),
    ("782.3", "Edema"),
    ("784.0", "Headache"),
    ("784.3", "Aphasia"),
    ("785.0", "Tachycardia, unspecified"),
    ("786.05", "Shortness of breath"),
    ("786.50", "Chest pain, unspecified"),
    ("786.59", "Other chest pain"),
    ("787.01", "Nausea with vomiting"),
    ("787.20", "Dysphagia, unspecified"),
    ("787.91", "Diarrhea"),
    ("788.20", "Retention of urine, unspecified"),
    ("788.30", "Urinary incontinence, unspecified"),
    ("789.00", "Abdominal pain, unspecified site"),
    ("789.59", "Other ascites"),
    ("790.6", "Other abnormal blood chemistry"),
    ("790.92", "Abnormal coagulation profile"),
    ("791.0", "Proteinuria"),
    ("793.11", "Solitary pulmonary nodule"),
    ("799.02", "Hypoxemia"),
    ("799.4", "Cachexia"),
    ("805.4", "Closed fracture of lumbar vertebra without mention of spinal cord injury"),
    ("807.01", "Closed fracture of one rib"),
    ("820.21", "Closed fracture of intertrochanteric section of neck of femur"),
    ("820.8", "Closed fracture of unspecified part of neck of femur"),
    ("824.8", "Unspecified fracture of ankle, closed"),
    ("850.9", "Concussion, unspecified"),
    ("852.00", "Subarachnoid hemorrhage following injury without mention of open intracranial wound, unspecified state of consciousness"),
    ("852.20", "Subdural hemorrhage following injury without mention of open intracranial wound, unspecified state of consciousness"),
    ("920", "Contusion of face, scalp, and neck except eye(s)"),
    ("959.01", "Head injury, unspecified"),
    ("965.09", "Poisoning by other opiates and related narcotics"),
    ("969.4", "Poisoning by benzodiazepine-based tranquilizers"),
    ("977.9", "Poisoning by unspecified drug or medicinal substance"),
    ("996.62", "Infection and inflammatory reaction due to other vascular device, implant, and graft"),
    ("996.81", "Complications of transplanted kidney"),
    ("997.1", "Cardiac complications, not elsewhere classified"),
    ("997.31", "Ventilator associated pneumonia"),
    ("998.11", "Hemorrhage complicating a procedure"),
    ("998.12", "Hematoma complicating a procedure"),
    ("998.59", "Other postoperative infection"),
    ("E849.0", "Accidents occurring in home"),
    ("E849.8", "Accidents occurring in other specified places"),
    ("E885.9", "Accidental fall from other slip, tripping, or stumbling"),
    ("E888.9", "Unspecified fall"),
    ("E879.8", "Other specified procedures as the cause of abnormal reaction of patient, or of later complication, without mention of misadventure at time of procedure"),
    ("E930.0", "Penicillins causing adverse effects in therapeutic use"),
    ("E932.0", "Adrenal cortical steroids causing adverse effects in therapeutic use"),
    ("E935.2", "Other opiates and related narcotics causing adverse effects in therapeutic use"),
    ("E947.8", "Other drugs and medicinal substances causing adverse effects in therapeutic use"),
    ("V02.54", "Carrier or suspected carrier of Methicillin resistant Staphylococcus aureus"),
    ("V09.0", "Infection with microorganisms resistant to penicillins"),
    ("V12.04", "Personal history of Methicillin resistant Staphylococcus aureus"),
    ("V12.59", "Personal history of other diseases of circulatory system"),
    ("V15.81", "Personal history of noncompliance with medical treatment, presenting hazards to health"),
    ("V15.88", "History of fall"),
    ("V16.3", "Family history of malignant neoplasm of breast"),
    ("V17.3", "Family history of ischemic heart disease"),
    ("V29.0", "Observation for suspected infectious condition"),
    ("V30.00", "Single liveborn, born in hospital, delivered without mention of cesarean section"),
    ("V30.01", "Single liveborn, born in hospital, delivered by cesarean section"),
    ("V42.0", "Kidney replaced by transplant"),
    ("V42.7", "Liver replaced by transplant"),
    ("V43.3", "Heart valve replaced by other means"),
    ("V43.64", "Hip joint replacement"),
    ("V43.65", "Knee joint replacement"),
    ("V44.0", "Tracheostomy status"),
    ("V44.1", "Gastrostomy status"),
    ("V45.01", "Cardiac pacemaker in situ"),
    ("V45.02", "Automatic implantable cardiac defibrillator in situ"),
    ("V45.11", "Renal dialysis status"),
    ("V45.89", "Other postprocedural status"),
    ("V46.2", "Dependence on supplemental oxygen"),
    ("V49.83", "Awaiting organ transplant status"),
    ("V58.65", "Long-term (current) use of steroids"),
    ("V58.69", "Long-term (current) use of other medications"),
    ("V60.0", "Lack of housing"),
    ("V62.84", "Suicidal ideation"),
    ("V64.1", "Surgical or other procedure not carried out because of contraindication"),
    ("V66.7", "Encounter for palliative care"),
    ("V85.41", "Body Mass Index 40.0-44.9, adult"),
    ("V87.41", "Personal history of antineoplastic chemotherapy"),
)
_ICD9_PX_TAIL: tuple[tuple[str, str], ...] = (
    ("00.40", "Procedure on single vessel"),
    ("96.04", ""), ("96.71", ""), ("99.04", ""), ("39.61", ""), ("96.72", ""), ("88.56", ""), ("38.91", ""),
    ("36.15", ""), ("99.15", ""), ("88.72", ""), ("37.22", ""), ("33.24", ""), ("39.95", ""), ("45.13", ""),
    ("37.23", ""),
    ("00.14", "Injection or infusion of oxazolidinone class of antibiotics"),
    ("00.17", "Infusion of vasopressor agent"),
    ("00.41", "Procedure on two vessels"),
    ("00.45", "Insertion of one vascular stent"),
    ("00.46", "Insertion of two vascular stents"),
    ("03.31", "Spinal tap"),
    ("01.59", "Other excision or destruction of lesion or tissue of brain"),
    ("31.1", "Temporary tracheostomy"),
    ("31.29", "Other permanent tracheostomy"),
    ("33.22", "Fiber-optic bronchoscopy"),
    ("33.23", "Other bronchoscopy"),
    ("34.04", "Insertion of intercostal catheter for drainage"),
    ("34.91", "Thoracentesis"),
    ("36.06", "Insertion of non-drug-eluting coronary artery stent(s)"),
    ("36.07", "Insertion of drug-eluting coronary artery stent(s)"),
    ("36.12", "(Aorto)coronary bypass of two coronary arteries"),
    ("36.13", "(Aorto)coronary bypass of three coronary arteries"),
    ("37.21", "Right heart cardiac catheterization"),
    ("38.95", "Venous catheterization for renal dialysis"),
    ("39.90", "Insertion of non-drug-eluting peripheral (non-coronary) vessel stent(s)"),
    ("41.31", "Biopsy of bone marrow"),
    ("42.23", "Other esophagoscopy"),
    ("43.11", "Percutaneous [endoscopic] gastrostomy [PEG]"),
    ("44.43", "Endoscopic control of gastric or duodenal bleeding"),
    ("45.16", "Esophagogastroduodenoscopy [EGD] with closed biopsy"),
    ("45.23", "Colonoscopy"),
    ("45.25", "Closed [endoscopic] biopsy of large intestine"),
    ("47.01", "Laparoscopic appendectomy"),
    ("50.11", "Closed (percutaneous) [needle] biopsy of liver"),
    ("51.10", "Endoscopic retrograde cholangiopancreatography [ERCP]"),
    ("51.23", "Laparoscopic cholecystectomy"),
    ("51.87", "Endoscopic insertion of stent (tube) into bile duct"),
    ("54.11", "Exploratory laparotomy"),
    ("54.91", "Percutaneous abdominal drainage"),
    ("55.69", "Other kidney transplantation"),
    ("57.94", "Insertion of indwelling urinary catheter"),
    ("64.0", "Circumcision"),
    ("73.59", "Other manually assisted delivery"),
    ("74.1", "Low cervical cesarean section"),
    ("81.51", "Total hip replacement"),
    ("81.54", "Total knee replacement"),
    ("86.22", "Excisional debridement of wound, infection, or burn"),
    ("86.28", "Nonexcisional debridement of wound, infection or burn"),
    ("87.03", "Computerized axial tomography of head"),
    ("87.44", "Routine chest x-ray, so described"),
    ("88.01", "Computerized axial tomography of abdomen"),
    ("88.38", "Other computerized axial tomography"),
    ("88.91", "Magnetic resonance imaging of brain and brain stem"),
    ("96.07", "Insertion of other (naso-)gastric tube"),
    ("96.56", "Other lavage of bronchus and trachea"),
    ("99.05", "Transfusion of platelets"),
    ("99.06", "Transfusion of coagulation factors"),
    ("99.07", "Transfusion of other serum"),
    ("99.55", "Prophylactic administration of vaccine against other diseases"),
    ("99.60", "Cardiopulmonary resuscitation, not otherwise specified"),
    ("99.62", "Other electric countershock of heart"),
)


@dataclass(frozen=True)
class CodeInfo:
    """One code of the synthetic label space.

    Attributes:
        version: 9 or 10 (the `icd_version` column).
        code: as stored in MIMIC-IV, without a dot (`4019`, `0389`, `J189`, `02HV33Z`).
        is_diagnosis: True for diagnoses_icd, False for procedures_icd.
        title: public long title (d_icd_* tables).
        phrases: invented clinical phrases; at least one is written into every admission coded with it.
        top: True for the 50 codes of Nguyen et al.'s top-50 list of this version.
    """

    version: int
    code: str
    is_diagnosis: bool
    title: str
    phrases: tuple[str, ...]
    top: bool


_STOPWORDS = frozenset(
    "a an and as at by for from in into of on or other the to with without unspecified specified elsewhere "
    "classified not nos site type part due via mention stated".split())
_QUALIFIERS = ("known", "findings of", "evidence of", "treated for", "noted")


def _title_phrases(code: str, title: str) -> tuple[str, ...]:
    """1-2 phrases related to but not identical with `title`: stopwords dropped, words dropped and swapped.

    Seeded by the code only, so a code's phrases never depend on the seed or on n_tail_codes.
    """
    rng = random.Random(f"phrase:{code}")
    words = re.findall(r"[a-z0-9]+(?:['-][a-z0-9]+)*", re.sub(r"\[[^\]]*\]", " ", title).lower())
    content = list(dict.fromkeys(w for w in words if w not in _STOPWORDS)) or words
    flat = " ".join(words)
    phrases: list[str] = []
    for _ in range(rng.choice((1, 2, 2))):
        keep = [w for w in content if rng.random() < 0.8] if len(content) > 2 else list(content)
        if len(keep) < min(2, len(content)):
            keep = content[:2]
        keep = keep[:6]
        if len(keep) >= 3 and rng.random() < 0.5:  # reorder: clinicians rarely write a title's word order
            i = rng.randrange(len(keep) - 1)
            keep[i], keep[i + 1] = keep[i + 1], keep[i]
        phrase = " ".join(keep)
        if phrase == flat or phrase in phrases or len(keep) < 3:  # short ones ("pain") would be too generic
            phrase = f"{rng.choice(_QUALIFIERS)} {phrase}"
        if phrase not in phrases:
            phrases.append(phrase)
    return tuple(phrases)


def _icd10_cm():
    try:
        with warnings.catch_warnings():  # its data loading uses deprecated importlib.resources calls
            warnings.simplefilter("ignore", DeprecationWarning)
            import simple_icd_10_cm as cm  # ~2 s to import: only when ICD-10 titles are needed
    except ImportError:
        raise ConfigError("write_demo_mimic4 needs the package simple-icd-10-cm for ICD-10-CM titles; "
                          "install it with `pip install simple-icd-10-cm`.") from None
    return cm


@functools.lru_cache(maxsize=8)
def code_catalogue(n_tail_codes: int = 200) -> tuple[CodeInfo, ...]:
    """The label space: both top-50 lists plus up to `n_tail_codes` tail codes per version.

    Tail codes are a fixed list (independent of the seed); a larger `n_tail_codes` extends it, keeping the
    first codes. ICD-9 tail codes are capped at the embedded list (dx + px); ICD-10 takes its CM tail from
    simple_icd_10_cm's billable codes and ~1/5 of the tail from embedded ICD-10-PCS codes.

    Args:
        n_tail_codes: tail codes wanted per ICD version (>= 0).
    Returns:
        CodeInfo tuples: ICD-9 top, ICD-9 tail (by decreasing frequency), ICD-10 top, ICD-10 tail.
    Raises:
        ConfigError: n_tail_codes is negative, or simple-icd-10-cm is missing.
    """
    if not isinstance(n_tail_codes, int) or isinstance(n_tail_codes, bool) or n_tail_codes < 0:
        raise ConfigError(f"n_tail_codes must be a non-negative integer, got {n_tail_codes!r}.")
    cm = _icd10_cm()
    caml = {c: (title, phrases) for c, _, title, phrases in CODE_INFO}
    out: list[CodeInfo] = []

    def icd9(dotted: str, is_dx: bool, title: str, top: bool) -> CodeInfo:
        if dotted in caml:
            title, phrases = caml[dotted][0], caml[dotted][1]
        elif dotted in _ICD9_TOP_EXTRA:
            title, phrases = _ICD9_TOP_EXTRA[dotted]
        else:
            phrases = _title_phrases(dotted, title)
        return CodeInfo(9, dotted.replace(".", ""), is_dx, title, phrases, top)

    out.extend(icd9(c, c not in _TOP_ICD9_PROCEDURES, "", True) for c in TOP50_ICD9)
    n_px = min(len(_ICD9_PX_TAIL), n_tail_codes // 5)
    n_dx = min(len(_ICD9_DX_TAIL), n_tail_codes - n_px)
    n_px = min(len(_ICD9_PX_TAIL), n_tail_codes - n_dx)
    out.extend(icd9(c, True, t, False) for c, t in _ICD9_DX_TAIL[:n_dx])
    out.extend(icd9(c, False, t, False) for c, t in _ICD9_PX_TAIL[:n_px])

    pcs = dict(_ICD10_PCS)
    for code in TOP50_ICD10:
        title = pcs[code] if code in pcs else cm.get_description(code)
        out.append(CodeInfo(10, code, code not in pcs, title, _ICD10_TOP_PHRASES[code], True))
    pcs_tail = [(c, t) for c, t in _ICD10_PCS if c not in TOP50_ICD10]
    n_px = min(len(pcs_tail), n_tail_codes // 5)
    n_dx = n_tail_codes - n_px
    if n_dx:
        # (cm.remove_dot is a linear search per call: strip dots by hand.)
        taken = {c.replace(".", "") for c in _ICD10_CM_TAIL_FIRST} | set(TOP50_ICD10)
        # Sorted then shuffled with a fixed generator: the same tail on every machine with the same package data.
        leaves = sorted({c for c in cm.get_all_codes(with_dots=True)
                         if cm.is_leaf(c) and c.replace(".", "") not in taken})
        random.Random(0x1CD10).shuffle(leaves)
        for dotted in (list(_ICD10_CM_TAIL_FIRST) + leaves)[:n_dx]:
            code, title = dotted.replace(".", ""), cm.get_description(dotted)
            out.append(CodeInfo(10, code, True, title, _title_phrases(code, title), False))
    out.extend(CodeInfo(10, c, False, t, _title_phrases(c, t), False) for c, t in pcs_tail[:n_px])
    return tuple(out)


# --- invented text --------------------------------------------------------------------------------------
# MIMIC-IV-Note layout (section headers, ___ for de-identified spans); every sentence below is invented.
_SEP = "\n \n"
_COURSE_HEAD, _MEDS_HEAD = f"{_SEP}Brief Hospital Course:", f"{_SEP}Discharge Medications:"
_FILLER4 = (
    "Patient was seen and examined with the team on morning rounds.", "Vitals stable overnight, afebrile.",
    "Labs reviewed, electrolytes repleted as needed.", "Physical therapy saw the patient and cleared for home.",
    "Tolerating a regular diet, ambulating in the hallway.", "Pain controlled on oral medications.",
    "Discussed the plan with ___ (daughter) by phone on ___.", "Social work met with the family.",
    "Medications reconciled with the outpatient list.", "Transferred from ___ for further management.",
    "Full code, confirmed with the patient.", "Seen by Dr. ___ from the consult service.",
    "Exam: alert, oriented x3, lungs with faint crackles, abdomen soft and non-tender.",
    "Patient said \"I want to go home\" on ___.", "Home with VNA services arranged for ___.",
    "BP 126/78, HR 84, RR 16, SpO2 95% on room air.", "Repeat labs at the follow-up visit.",
    "Procedure tolerated well, no immediate complications.", "Continued home regimen, with doses adjusted.",
    "Weight today ___ kg, down from admission.", "Case management involved, discharge planned for ___.",
)
_CHIEF = ("shortness of breath", "chest pain", "fever, weakness", "confusion", "abdominal pain", "fall at home",
          "leg swelling", "dizziness", "cough, fatigue")
_ALLERGIES = ("NKDA", "Penicillins (hives)", "Sulfa drugs (rash)", "lisinopril (cough) / codeine (nausea)",
              "iodinated contrast", "none on file")
_MEDS4 = ("Aspirin 81 mg PO DAILY", "Metoprolol Succinate XL 50 mg PO DAILY", "Atorvastatin 40 mg PO QPM",
          "Furosemide 40 mg PO DAILY", "Pantoprazole 40 mg PO Q24H", "Senna 8.6 mg PO BID:PRN constipation",
          "Acetaminophen 650 mg PO Q6H:PRN pain or fever", "Polyethylene Glycol 17 g PO DAILY",
          "Amlodipine 5 mg PO DAILY", "Levetiracetam 500 mg PO BID")
_SERVICES4 = ("MEDICINE", "CARDIOTHORACIC", "SURGERY", "NEUROLOGY", "CARDIOLOGY", "ORTHOPAEDICS", "OMED")
_DISPO = ("Home", "Home With Service", "Extended Care", "Expired")
_INSTRUCTIONS = (
    "Please take your medications as prescribed and keep your follow-up appointments.",
    "Call your doctor or return to the emergency room if you have \"red flag\" symptoms, such as fever, chest pain, "
    "or trouble breathing.",
    "Weigh yourself every morning, and call if your weight goes up by more than 3 lbs.",
    "It was a pleasure taking care of you at ___.", "Do not drive until cleared by your doctor.",
)
# Radiology: code-like findings, so a prepare step that wrongly read note/radiology would change documents.
_RAD_EXAMS = (
    ("CHEST (PA AND LAT)", ("pneumonia", "pleural effusion", "pulmonary edema", "atelectasis", "cardiomegaly",
                            "no pneumothorax", "consolidation concerning for pneumonia", "small left pleural effusion")),
    ("CHEST (PORTABLE AP)", ("pleural effusion", "pneumonia", "endotracheal tube in place", "picc line tip in the svc",
                             "interstitial edema", "bibasilar atelectasis")),
    ("CT HEAD W/O CONTRAST", ("no acute intracranial hemorrhage", "chronic small vessel ischemic disease",
                              "subdural hematoma", "old infarct")),
    ("CT ABD & PELVIS WITH CONTRAST", ("diverticulitis", "small bowel obstruction", "ascites", "hydronephrosis",
                                       "cholelithiasis")),
    ("BILAT LOWER EXT VEINS", ("deep vein thrombosis", "no deep vein thrombosis")),
    ("RENAL U.S.", ("hydronephrosis", "echogenic kidneys consistent with chronic kidney disease")),
)
_RAD_OTHER = ("Osseous structures intact.", "Unchanged lines.", "No free air.", "Limited by patient motion.")
README4 = """SYNTHETIC DATA - NOT MIMIC-IV. ALL NOTES ARE INVENTED (SEED {seed}).

This folder was generated by clinicode (clinicode.synthetic.mimic4.write_demo_mimic4, seed={seed}).
It only imitates the column layout of MIMIC-IV v2.2 (hosp/diagnoses_icd, hosp/procedures_icd,
hosp/d_icd_diagnoses, hosp/d_icd_procedures) and MIMIC-IV-Note v2.2 (note/discharge, note/radiology).
Every note is invented from templates; no patient data is inside. ICD titles are public (CMS ICD-9-CM
and ICD-10-PCS long titles, ICD-10-CM via simple-icd-10-cm). Results on this folder are not comparable
with published MIMIC-IV results.
"""

# Trap rates (per admission unless said otherwise).
_P_ICD9 = 0.6                 # extra admissions coded in ICD-9; the rest ICD-10
_KINDS, _KIND_P = "LNC", (0.75, 0.18, 0.07)  # L codes+note, N codes without discharge note, C note without codes
# With split lists, the listed ids are the coded admissions with a note; the extra ones then stand mostly for
# MIMIC-IV's ~100k admissions without a discharge note.
_KIND_P_WITH_LISTS = (0.10, 0.85, 0.05)
_P_TAIL = 0.35                # per code slot: drawn from the tail instead of the top 50
_P_DUP_CODE = 0.025           # per code row: written twice
_P_ADDENDUM = 0.05            # an AD row carrying part of the evidence
_P_AD_FIRST = 0.5             # ... stored before its DS row
_P_DUP_NOTE = 0.02            # an exactly repeated note row
_P_EMPTY = 0.02               # an extra row with empty text
_P_DISTRACTOR = 0.1           # a phrase of a code the admission does not have
_P_RAD_NO_HADM = 0.15         # radiology rows without hadm_id
_ADDENDUM_SHARE4 = 0.2        # an addendum is ~1/5 as long as a report (padding)
_CHUNK = 2000                 # admissions per written chunk: bounds memory at full size
_BOTH = 19                    # version mark of a listed admission coded in both ICD-9 and ICD-10


class _Padder4(_Padder):
    """synthetic._Padder's label-free corpus in MIMIC-IV dress: `___` for de-id brackets, ' \\n' section breaks."""

    def __init__(self, seed: int):
        super().__init__(seed)
        bounds = self.starts.tolist()
        deid = re.compile(r"\[\*\*.*?\*\*\]")
        units = [deid.sub("___", self.corpus[a:b]).replace("\n\n", _SEP) for a, b in zip(bounds[:-1], bounds[1:])]
        self.corpus = "".join(units)
        self.starts = np.concatenate([[0], np.cumsum([len(u) for u in units])]).astype(np.int64)


@dataclass
class _Pool:
    """Code indices into the catalogue with cumulative Zipf-like weights, for one version and table."""

    codes: list[int]
    cum: list[float]

    @classmethod
    def of(cls, codes: list[int], offset: float, power: float) -> "_Pool":
        w = 1.0 / (np.arange(len(codes)) + offset) ** power
        return cls(codes, np.cumsum(w).tolist())

    def draw(self, rng: random.Random, k: int) -> list[int]:
        return rng.choices(self.codes, cum_weights=self.cum, k=k) if self.codes and k > 0 else []


def _draw_codes(rng: random.Random, pools: dict, version: int) -> tuple[list[int], list[int]]:
    """(diagnoses, procedures) of one admission in one version: ~11 diagnoses and ~1.5 procedures on average."""
    n_dx = min(39, 1 + int(rng.gammavariate(3.0, 4.0)))
    n_tail = sum(rng.random() < _P_TAIL for _ in range(n_dx))
    dx = list(dict.fromkeys(pools[version, True, True].draw(rng, n_dx - n_tail)
                            + pools[version, True, False].draw(rng, n_tail)))
    px: list[int] = []
    if rng.random() < 0.65:
        n_px = 1 + int(rng.gammavariate(1.3, 1.4))
        n_tail = sum(rng.random() < 0.5 for _ in range(n_px))
        px = list(dict.fromkeys(pools[version, False, True].draw(rng, n_px - n_tail)
                                + pools[version, False, False].draw(rng, n_tail)))
    return dx or pools[version, True, True].draw(rng, 1), px


def _version_of(path: Path) -> int:
    """9 or 10 from the file name or its two nearest folders, the nearest part that names icd9 or icd10."""
    for part in reversed(path.absolute().parts[-3:]):
        low = part.lower()
        has9, has10 = bool(re.search(r"icd[-_]?9(?!\d)", low)), bool(re.search(r"icd[-_]?10(?!\d)", low))
        if has9 and has10:
            break
        if has9 or has10:
            return 9 if has9 else 10
    raise ConfigError(f"cannot tell the ICD version of split file {path}; expected 'icd9' or 'icd10' (not both) "
                      "in its name or folder, e.g. mimiciv_icd9_split.csv or icd10/train_full_hadm_ids.csv.")


def _read_hadm_lists(paths: Sequence[Path]) -> dict[int, int]:
    """hadm_id -> 9, 10 or _BOTH from split files (one id a line, optional `hadm_id` header, or `hadm_id,split`).

    An id in both an ICD-9 and an ICD-10 list is coded in both versions (Edin et al.'s lists share 7 such ids).

    Raises:
        ConfigError: a path's ICD version cannot be inferred.
        DataFormatError: a file is missing, unreadable, or holds a non-id or a non-MIMIC-IV id.
    """
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(p.glob("*.csv"))
            if not found:
                raise DataFormatError(f"split folder {p} holds no .csv file; expected hadm_id lists such as "
                                      "train_full_hadm_ids.csv or mimiciv_icd9_split.csv.")
            files.extend(found)
        else:
            files.append(p)
    listed: dict[int, int] = {}
    for path in files:
        version = _version_of(path)
        if not path.is_file():
            raise DataFormatError(f"split file {path} not found; expected a file of MIMIC-IV hadm_ids.")
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            edin = f.readline().strip().lower().replace(" ", "") == "hadm_id,split"
        ids = [h for split in read_split_file(path).values() for h in split] if edin else read_id_list(path)
        for hadm in ids:  # the same readers as `prepare`, so both agree on what a split file holds
            if not 20_000_000 <= hadm <= 29_999_999:
                raise DataFormatError(f"{path}: {hadm} is not a MIMIC-IV hadm_id; expected 8 digits starting with 2 "
                                      "(MIMIC-III ids do not fit).")
            if listed.setdefault(hadm, version) != version:
                listed[hadm] = _BOTH
    return listed


@dataclass
class _Counts:
    diagnoses_icd: int = 0
    procedures_icd: int = 0
    discharge: int = 0
    radiology: int = 0
    duplicate_code_rows: int = 0
    addenda: int = 0
    addenda_before_report: int = 0
    duplicate_note_rows: int = 0
    empty_text_rows: int = 0
    distractor_notes: int = 0
    admissions_codes_without_note: int = 0
    admissions_note_without_codes: int = 0
    radiology_without_hadm: int = 0
    discharge_text_chars: int = 0
    discharge_texts: int = 0


def _open_text4(path: Path, *, gzip: bool):
    if gzip:  # mtime=0: the same arguments give byte-identical .gz files
        raw = gzip_module.GzipFile(path, "wb", compresslevel=1, mtime=0)
        return io.TextIOWrapper(raw, encoding="utf-8", newline="")
    return open(path, "w", newline="", encoding="utf-8")


_FIRST_DAY = dt.date(2110, 1, 1).toordinal()  # MIMIC-IV shifts dates into ~2110-2210


def _date_str(ordinal: int) -> str:
    return dt.date.fromordinal(ordinal).isoformat()


def _stamp(rng: random.Random, ordinal: int, first_hour: int = 0) -> str:
    return f"{_date_str(ordinal)} {rng.randint(first_hour, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"


@dataclass
class _Seqs:
    """Running note_seq of the current subject's discharge (DS/AD) and radiology (RR) notes."""

    note: int = 0
    rad: int = 0


def _code_rows(rng: random.Random, cat: tuple[CodeInfo, ...], codes: list[int], s: int, h: int, admit: int,
               disch: int, is_dx: bool, counts: _Counts) -> list[tuple]:
    """diagnoses_icd or procedures_icd rows of one admission; ~2.5% of codes written again under a later seq_num."""
    rows, dups = [], []
    for seq, i in enumerate(codes, 1):
        c = cat[i]
        rows.append((s, h, seq, c.code, c.version) if is_dx else
                    (s, h, seq, _date_str(admit + rng.randint(0, disch - admit)), c.code, c.version))
        if rng.random() < _P_DUP_CODE:
            dups.append(rows[-1])
    rows.extend((*row[:2], len(codes) + n, *row[3:]) for n, row in enumerate(dups, 1))
    counts.duplicate_code_rows += len(dups)
    return rows


def _discharge_rows(rng: random.Random, s: int, h: int, disch: int, ds: str, ad: str, seqs: _Seqs, counts: _Counts,
                    texts: list[str], is_ad: list[bool]) -> list[tuple[str, int]]:
    """(csv prefix, index into `texts` or -1 for empty text) of one admission's discharge rows, in file order.

    Appends the DS (and AD) text to `texts`. Traps: an AD stored before its DS, an exact duplicate row, an extra
    row with empty text; the DS with text is always there.
    """
    ct = f"{_date_str(disch)} 00:00:00"
    rows = []
    for note_type, text in (("DS", ds), ("AD", ad)):
        if text:
            seqs.note += rng.randint(1, 3)
            stored = _stamp(rng, disch + (note_type == "AD") * rng.randint(0, 3), first_hour=8)
            rows.append((f"{s}-{note_type}-{seqs.note},{s},{h},{note_type},{seqs.note},{ct},{stored}", len(texts)))
            texts.append(text)
            is_ad.append(note_type == "AD")
    if len(rows) == 2:
        counts.addenda += 1
        if rng.random() < _P_AD_FIRST:  # stored out of note_seq order
            rows.reverse()
            counts.addenda_before_report += 1
    if rng.random() < _P_DUP_NOTE:
        rows.append(rows[-1])
        counts.duplicate_note_rows += 1
    if rng.random() < _P_EMPTY:
        seqs.note += 1
        t = rng.choice(("DS", "AD"))
        rows.append((f"{s}-{t}-{seqs.note},{s},{h},{t},{seqs.note},{ct},{_stamp(rng, disch, first_hour=8)}", -1))
        counts.empty_text_rows += 1
    return rows


def _radiology_rows(rng: random.Random, s: int, h: int, n_with: int, n_without: int, admit: int, disch: int,
                    sex: str, seqs: _Seqs, counts: _Counts) -> list[str]:
    """CSV lines of RR notes during one admission; the last `n_without` carry no hadm_id (outpatient studies)."""
    lines = []
    for j in range(n_with + n_without):
        seqs.rad += rng.randint(1, 4)
        hid = h if j < n_with else ""
        when = f"{_date_str(admit + rng.randint(0, disch - admit))} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
        lines.append(f"{s}-RR-{seqs.rad},{s},{hid},RR,{seqs.rad},{when}00,{when}{rng.randint(10, 59)},"
                     f"{_csv_field(_radiology_text(rng, sex))}\n")
    counts.radiology_without_hadm += n_without
    return lines


def _discharge_texts(rng: random.Random, cat: tuple[CodeInfo, ...], dx: list[int], px: list[int], ad_codes: set[int],
                     distractor: int | None, sex: str) -> tuple[str, str]:
    """(DS text, AD text or ""): every code's phrase once in history/course/procedures, diagnoses in the list too.

    Codes in `ad_codes` are mentioned only in the addendum.
    """
    hx, course, procs, diag, ad = [], [], [], [], []
    for i in dx:
        ph = cat[i].phrases
        first = rng.choice(ph)
        if i in ad_codes:
            ad.append(first)
            continue
        (hx if rng.random() < 0.5 else course).append(first)
        diag.append(rng.choice(ph))
    for i in px:
        ph = cat[i].phrases
        if i in ad_codes:
            ad.append(rng.choice(ph))
            continue
        procs.append(rng.choice(ph))
        if rng.random() < 0.5:
            course.append(rng.choice(ph))
    if distractor is not None:
        course.append(rng.choice(cat[distractor].phrases))
    rng.shuffle(hx)
    rng.shuffle(course)
    fill = lambda k: " ".join(rng.sample(_FILLER4, k))  # noqa: E731
    title, noun = ("Ms.", "woman") if sex == "F" else ("Mr.", "man")
    age = "___" if rng.random() < 0.7 else str(rng.randint(19, 89))
    cc = rng.choice(_CHIEF)
    meds = "\n".join(f"{k}. {m}" for k, m in enumerate(rng.sample(_MEDS4, rng.randint(2, 6)), 1))
    diag_text = f"PRIMARY:\n{diag[0]}\n\nSECONDARY:\n" + "\n".join(diag[1:]) if diag else "see hospital course"
    instructions = " ".join(rng.sample(_INSTRUCTIONS, 2))
    ds = (
        f" \nName:  ___                     Unit No:   ___\n \nAdmission Date:  ___              Discharge Date:   ___\n"
        f" \nDate of Birth:  ___             Sex:   {sex}\n \nService: {rng.choice(_SERVICES4)}\n \nAllergies: \n"
        f"{rng.choice(_ALLERGIES)}\n \nAttending: ___.\n \nChief Complaint:\n{cc}\n"
        f" \nMajor Surgical or Invasive Procedure:\n{chr(10).join(procs) or 'None'}\n"
        f" \nHistory of Present Illness:\n{title} ___ is a {age} year old {noun} with a history of "
        f"{', '.join(hx) or 'no major medical problems'}, who presents from ___ with {cc}. {fill(2)}\n"
        f" \nPhysical Exam:\n{fill(1)}"
        f"{_COURSE_HEAD}\n{fill(2)} Hospital course notable for {', '.join(course) or 'an uneventful stay'}. "
        f"{fill(2)}\n"
        f" \nMedications on Admission:\nPer the outpatient list, confirmed with ___."
        f"{_MEDS_HEAD}\n{meds}\n \nDischarge Disposition:\n{rng.choice(_DISPO)}\n"
        f" \nDischarge Diagnosis:\n{diag_text}\n \nDischarge Condition:\nstable, alert, walking with a walker.\n"
        f" \nDischarge Instructions:\nDear {title} ___,\n\n{instructions}\n\nSincerely,\nYour ___ Team\n"
        f" \nFollowup Instructions:\n___\n"
    )
    if not ad:
        return ds, ""
    rng.shuffle(ad)
    return ds, (f"ADDENDUM to discharge summary of ___:\n{fill(1)} Additional diagnoses after review: "
                f"{', '.join(ad)}.\n{fill(1)}\n___ MD")


def _radiology_text(rng: random.Random, sex: str) -> str:
    exam, findings = rng.choice(_RAD_EXAMS)
    found = rng.sample(findings, min(len(findings), rng.randint(1, 3)))
    return (f"EXAMINATION:  {exam}\n\nINDICATION:  ___ year old {'woman' if sex == 'F' else 'man'} with "
            f"{rng.choice(_CHIEF)}, evaluate for {found[0]}.\n\nTECHNIQUE:  Standard views.\n\nCOMPARISON:  ___\n\n"
            f"FINDINGS: \n\n{'. '.join(f.capitalize() for f in found)}. {rng.choice(_RAD_OTHER)}\n\n"
            f"IMPRESSION: \n\n{found[0].capitalize()}, correlate clinically.")


def _check_args(n_admissions, seed, n_tail_codes, discharge_chars, n_radiology, gzip) -> None:
    def is_int(v) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

    if not is_int(n_admissions) or n_admissions < 0:
        raise ConfigError(f"n_admissions must be a non-negative integer, got {n_admissions!r}.")
    if not is_int(seed) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}.")
    if not is_int(n_tail_codes) or n_tail_codes < 0:
        raise ConfigError(f"n_tail_codes must be a non-negative integer, got {n_tail_codes!r}.")
    if discharge_chars is not None and (not is_int(discharge_chars) or discharge_chars < 1):
        raise ConfigError(f"discharge_chars must be a positive integer or None, got {discharge_chars!r}.")
    if n_radiology is not None and (not is_int(n_radiology) or n_radiology < 0):
        raise ConfigError(f"n_radiology must be a non-negative integer or None, got {n_radiology!r}.")
    if not isinstance(gzip, bool):
        raise ConfigError(f"gzip must be True or False, got {gzip!r}.")


def write_demo_mimic4(
    out_dir: Path,
    *,
    n_admissions: int = DEMO.n_admissions,
    seed: int = DEMO.seed,
    gzip: bool = False,
    n_tail_codes: int = 200,
    discharge_chars: int | None = None,
    n_radiology: int | None = None,
    hadm_ids_from: Sequence[Path] = (),
) -> dict:
    """Write a synthetic MIMIC-IV folder atomically; the options are those of `_write_demo_mimic4`.

    `out_dir` may be new, empty, or an earlier `demo-data` folder (replaced whole); anything else is refused.
    """
    from clinicode.artifacts import atomic_dir, check_output, make_manifest, write_manifest
    from clinicode.synthetic.mimic3 import SYNTHETIC_KIND, is_synthetic_folder

    _check_args(n_admissions, seed, n_tail_codes, discharge_chars, n_radiology, gzip)
    paths = [hadm_ids_from] if isinstance(hadm_ids_from, (str, Path)) else list(hadm_ids_from)
    final = Path(out_dir)
    check_output(final, option="--out", command="demo-data", folder=True, recognise=is_synthetic_folder,
                 inputs={f"--hadm-ids-from {p}": p for p in paths})
    with atomic_dir(final, replaces=is_synthetic_folder) as tmp:
        summary = _write_demo_mimic4(tmp, n_admissions=n_admissions, seed=seed, gzip=gzip, n_tail_codes=n_tail_codes,
                                     discharge_chars=discharge_chars, n_radiology=n_radiology, hadm_ids_from=paths)
        summary["out_dir"] = str(final)
        summary["files"] = {k: str(final / Path(v).relative_to(tmp)) for k, v in summary["files"].items()}
        write_manifest(tmp, make_manifest(SYNTHETIC_KIND, format="mimic4", simple_icd_10_cm=_cm_version(),
                                          **{k: v for k, v in summary.items() if k not in ("out_dir", "files")}))
    return summary


def _cm_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("simple-icd-10-cm")
    except PackageNotFoundError:
        return "?"


def _write_demo_mimic4(
    out_dir: Path,
    *,
    n_admissions: int,
    seed: int,
    gzip: bool,
    n_tail_codes: int,
    discharge_chars: int | None,
    n_radiology: int | None,
    hadm_ids_from: Sequence[Path],
) -> dict:
    """Write a synthetic MIMIC-IV v2.2 + MIMIC-IV-Note v2.2 shaped folder (`hosp/`, `note/`, README.txt).

    Traps as in real data: ICD-9 and ICD-10 admissions mixed in one table, undotted codes with leading zeros
    (0389, 0040, 0BH17EZ) and 3-character codes (486, I10), duplicate code rows, admissions with codes but no
    discharge note and with a note but no codes, AD addenda carrying part of the evidence (half stored before
    their DS row), exact duplicate note rows, empty texts, radiology notes with code-like words (some without
    hadm_id), `___` de-identification, quoted newlines, commas and double quotes in text.

    Args:
        out_dir: the (temporary) folder to fill.
        n_admissions: admissions in no split list, with all traps (0 is allowed with `hadm_ids_from`). Alone:
            75% coded with a note, 18% coded without a discharge note, 7% a note without codes. With
            `hadm_ids_from`: 10/85/5%, as MIMIC-IV's ~100k admissions without a discharge note
            (n_admissions=100_000 with all published lists gives MIMIC-IV's size).
        seed: the same arguments give byte-identical files (with the same simple-icd-10-cm data).
        gzip: write `.csv.gz` (deterministic headers) instead of `.csv`.
        n_tail_codes: tail codes per ICD version beyond the top 50, Zipf-like rarer (some seen in 1-9
            admissions, others in dozens at the default size). ICD-9 is capped at the embedded list
            (`summary["n_tail_codes"]` tells how many were used, `summary["tail_capped"]` whether capped).
        discharge_chars: pad DS and AD texts to this mean length in characters with label-free filler
            (MIMIC-IV's discharge notes average ~10,500). None: short template notes (~1.5 KB); ids, codes and
            signal phrases are the same either way.
        n_radiology: radiology rows (default 2 per admission), ~15% without hadm_id.
        hadm_ids_from: split files or folders of them (one id a line with or without a `hadm_id` header, or
            `hadm_id,split` CSV). The ICD version comes from `icd9`/`icd10` in the path. Every listed id gets
            a non-empty DS note and at least one top-50 code of that version (traps only where they cannot
            remove it), so preparing with those lists reproduces the published counts. An id in lists of
            both versions is coded in both, with a top-50 code of each.
    Returns:
        {"out_dir", "synthetic": True, "seed", "n_admissions" (all), "n_listed", "n_extra",
        "admissions_by_version" {9, 10, "both"}, "rows" (per table), "traps" (counts), "n_tail_codes" {9, 10},
        "n_tail_codes_requested", "tail_capped", "discharge_chars", "mean_discharge_chars", "bytes", "files"}.
    Raises:
        ConfigError: a bad argument, a split path without a clear ICD version, or simple-icd-10-cm missing.
        DataFormatError: an unreadable or malformed split file.
    """
    _check_args(n_admissions, seed, n_tail_codes, discharge_chars, n_radiology, gzip)
    if isinstance(hadm_ids_from, (str, Path)):
        hadm_ids_from = [hadm_ids_from]
    listed = _read_hadm_lists([Path(p) for p in hadm_ids_from])
    n_total = len(listed) + n_admissions
    if n_total < 1:
        raise ConfigError("n_admissions must be at least 1 when hadm_ids_from lists no ids, got 0.")
    cat = code_catalogue(n_tail_codes)
    out_dir = Path(out_dir)
    for sub in ("hosp", "note"):
        (out_dir / sub).mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)

    # --- label pools: per version and table, top and tail, rank-weighted -------------------------------
    pools: dict[tuple[int, bool, bool], _Pool] = {}
    for ver in (9, 10):
        for is_dx in (True, False):
            top = [i for i, c in enumerate(cat) if c.version == ver and c.is_diagnosis == is_dx and c.top]
            tail = [i for i, c in enumerate(cat) if c.version == ver and c.is_diagnosis == is_dx and not c.top]
            pools[ver, is_dx, True] = _Pool.of(top, 3.0, 0.9)
            pools[ver, is_dx, False] = _Pool.of(tail, 1.0, 1.0)  # Zipf: rank 1 common, the last ones rare
    same_version = {v: [i for i, c in enumerate(cat) if c.version == v] for v in (9, 10)}

    # --- admissions: ids, versions, kinds, subjects, sorted like the real tables ---------------------------
    listed_ids = np.fromiter(listed, dtype=np.int64, count=len(listed))
    listed_ver = np.fromiter(listed.values(), dtype=np.int64, count=len(listed))
    taken = set(listed)
    extra: list[int] = []
    while len(extra) < n_admissions:
        for h in (nrng.integers(20_000_000, 30_000_000, size=n_admissions - len(extra) + 16)).tolist():
            if h not in taken and len(extra) < n_admissions:
                taken.add(h)
                extra.append(h)
    hadm = np.concatenate([listed_ids, np.asarray(extra, dtype=np.int64)])
    version = np.concatenate([listed_ver, np.where(nrng.random(n_admissions) < _P_ICD9, 9, 10)])
    kind = np.concatenate([np.zeros(len(listed), dtype=np.int64),
                           nrng.choice(len(_KINDS), size=n_admissions, p=_KIND_P_WITH_LISTS if listed else _KIND_P)])
    is_listed = np.arange(n_total) < len(listed)
    n_subjects = max(1, int(round(n_total * 0.8)))  # some patients have several admissions
    subject_ids = np.sort(nrng.choice(10_000_000, size=n_subjects, replace=False) + 10_000_000)
    subject = subject_ids[nrng.integers(0, n_subjects, size=n_total)]
    order = np.lexsort((hadm, subject))
    n_rad = 2 * n_total if n_radiology is None else n_radiology
    rad_adm = nrng.integers(0, n_total, size=n_rad)
    rad_no_hadm = nrng.random(n_rad) < _P_RAD_NO_HADM
    rad_with = np.bincount(rad_adm[~rad_no_hadm], minlength=n_total)
    rad_without = np.bincount(rad_adm[rad_no_hadm], minlength=n_total)

    ext = ".csv.gz" if gzip else ".csv"
    files = {name: out_dir / sub / f"{name}{ext}" for name, (sub, _) in TABLES.items()}
    padder = _Padder4(seed) if discharge_chars is not None else None
    counts = _Counts()
    handles = {name: _open_text4(files[name], gzip=gzip)
               for name in ("diagnoses_icd", "procedures_icd", "discharge", "radiology")}
    try:
        writers = {name: csv.writer(f, lineterminator="\n") for name, f in handles.items()}
        for name, f in handles.items():
            writers[name].writerow(TABLES[name][1])
        prev_subject = -1
        seqs = _Seqs()
        for lo in range(0, n_total, _CHUNK):
            dx_rows: list[tuple] = []
            px_rows: list[tuple] = []
            note_rows: list[tuple[str, int]] = []  # (csv prefix, index into texts or -1 for empty)
            texts: list[str] = []
            is_ad: list[bool] = []
            rad_lines: list[str] = []
            for a in order[lo:lo + _CHUNK].tolist():
                h, s, v, k = int(hadm[a]), int(subject[a]), int(version[a]), _KINDS[kind[a]]
                if s != prev_subject:  # note_seq counts per subject, as in MIMIC-IV-Note
                    prev_subject, seqs.note, seqs.rad = s, rng.randint(1, 20), rng.randint(1, 30)
                sex = "F" if s % 2 else "M"
                admit = _FIRST_DAY + rng.randrange(36_500)
                disch = admit + 1 + int(rng.gammavariate(1.5, 3.0))
                dx: list[int] = []
                px: list[int] = []
                if k != "C":
                    # Listed in both an ICD-9 and an ICD-10 list (7 real ids are): coded in both versions.
                    for vv in ((9, 10) if v == _BOTH else (v,)):
                        vdx, vpx = _draw_codes(rng, pools, vv)
                        if is_listed[a] and not any(cat[i].top for i in vdx + vpx):
                            vdx.insert(0, pools[vv, True, True].draw(rng, 1)[0])  # listed ids keep a top-50 code
                        dx += vdx
                        px += vpx
                dx_rows += _code_rows(rng, cat, dx, s, h, admit, disch, True, counts)
                px_rows += _code_rows(rng, cat, px, s, h, admit, disch, False, counts)
                if k == "N":
                    counts.admissions_codes_without_note += 1
                else:
                    counts.admissions_note_without_codes += k == "C"
                    codes = dx + px
                    ad_codes: set[int] = set()
                    if codes and rng.random() < _P_ADDENDUM:
                        ad_codes = set(rng.sample(codes, rng.randint(1, max(1, len(codes) // 2))))
                    distractor = None
                    if rng.random() < _P_DISTRACTOR:
                        distractor = rng.choice(same_version[9 if v == _BOTH else v])
                        if distractor in codes:
                            distractor = None
                    counts.distractor_notes += distractor is not None
                    ds, ad = _discharge_texts(rng, cat, dx, px, ad_codes, distractor, sex)
                    note_rows += _discharge_rows(rng, s, h, disch, ds, ad, seqs, counts, texts, is_ad)
                rad_lines += _radiology_rows(rng, s, h, int(rad_with[a]), int(rad_without[a]), admit, disch, sex,
                                             seqs, counts)

            if padder is not None and texts:
                # Padding draws from the padder's own generator: ids, codes and phrases match the unpadded run.
                ad_arr = np.asarray(is_ad, dtype=bool)
                base = np.fromiter(map(len, texts), dtype=np.float64, count=len(texts))
                report_mean = discharge_chars / (1 - (1 - _ADDENDUM_SHARE4) * ad_arr.mean())
                total = padder.lengths(np.where(ad_arr, _ADDENDUM_SHARE4 * report_mean, report_mean), 0.5, 80_000)
                pad = np.maximum(total - base - 4, 0)
                b1, e1 = padder.spans(0.7 * pad, at_header=True)
                b2, e2 = padder.spans(0.3 * pad, at_header=False)
                corpus = padder.corpus
                texts = [_insert_padding(t, corpus, sp, heads=(_COURSE_HEAD, _MEDS_HEAD))
                         for t, sp in zip(texts, zip(b1, e1, b2, e2))]
            counts.discharge_text_chars += sum(map(len, texts))
            counts.discharge_texts += len(texts)
            fields = [_csv_field(t) for t in texts]
            handles["discharge"].write("".join(f"{p},{fields[i] if i >= 0 else ''}\n" for p, i in note_rows))
            handles["radiology"].write("".join(rad_lines))
            writers["diagnoses_icd"].writerows(dx_rows)
            writers["procedures_icd"].writerows(px_rows)
            counts.diagnoses_icd += len(dx_rows)
            counts.procedures_icd += len(px_rows)
            counts.discharge += len(note_rows)
            counts.radiology += len(rad_lines)
    finally:
        for f in handles.values():
            f.close()

    # --- title tables: every code of the catalogue, sorted like MIMIC-IV's (code, version) ---------------
    title_rows = {}
    for name, want_dx in (("d_icd_diagnoses", True), ("d_icd_procedures", False)):
        rows = sorted((c.code, c.version, c.title) for c in cat if c.is_diagnosis == want_dx)
        with _open_text4(files[name], gzip=gzip) as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(TITLES_HEADER)
            w.writerows(rows)
        title_rows[name] = len(rows)
    (out_dir / "README.txt").write_text(README4.format(seed=seed), encoding="utf-8")

    n_tail = {v: sum(1 for c in cat if c.version == v and not c.top) for v in (9, 10)}
    summary = {
        "out_dir": str(out_dir),
        "synthetic": True,
        "seed": seed,
        "n_admissions": n_total,
        "n_listed": len(listed),
        "n_extra": n_admissions,
        "admissions_by_version": {9: int((version == 9).sum()), 10: int((version == 10).sum()),
                                  "both": int((version == _BOTH).sum())},
        "rows": {"diagnoses_icd": counts.diagnoses_icd, "procedures_icd": counts.procedures_icd,
                 "d_icd_diagnoses": title_rows["d_icd_diagnoses"], "d_icd_procedures": title_rows["d_icd_procedures"],
                 "discharge": counts.discharge, "radiology": counts.radiology},
        "traps": {k: getattr(counts, k) for k in (
            "duplicate_code_rows", "addenda", "addenda_before_report", "duplicate_note_rows", "empty_text_rows",
            "distractor_notes", "admissions_codes_without_note", "admissions_note_without_codes",
            "radiology_without_hadm")},
        "n_tail_codes": n_tail,
        "n_tail_codes_requested": n_tail_codes,
        "tail_capped": any(n < n_tail_codes for n in n_tail.values()),
        "discharge_chars": discharge_chars,
        "mean_discharge_chars": round(counts.discharge_text_chars / max(1, counts.discharge_texts), 1),
        "bytes": sum(p.stat().st_size for p in files.values()),
        "files": {name: str(p) for name, p in files.items()},
    }
    log.info("synthetic MIMIC-IV folder %s: %d admissions, %d discharge rows", out_dir, n_total, counts.discharge)
    return summary
